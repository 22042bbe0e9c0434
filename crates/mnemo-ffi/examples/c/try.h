/*
 * The examples' error handling: fail(what, rc) prints what failed with mnemo's code and
 * message, prefixed with EXAMPLE (the program's name, defined before this is included),
 * and exits 2; TRY(call) fails unless the call returns MNEMO_OK.
 */
#ifndef MNEMO_EXAMPLE_TRY_H
#define MNEMO_EXAMPLE_TRY_H

#include <mnemo.h>

#include <stdio.h>
#include <stdlib.h>

static void fail(const char *what, int rc)
{
    fprintf(stderr, EXAMPLE ": %s: %s (%d): %s\n", what, mnemo_strerror(rc), rc,
            mnemo_errormsg());
    exit(2);
}

#define TRY(call)                                                                             \
    do {                                                                                      \
        int rc_ = (call);                                                                     \
        if (rc_ != MNEMO_OK)                                                                  \
            fail(#call, rc_);                                                                 \
    } while (0)

#endif
