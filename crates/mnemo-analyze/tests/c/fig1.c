/* The shape of NVMOVE's Figure 1: a record restored at start-up from a file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct record {
    int id;
    char name[32];
    struct record *next;
};

struct stats {
    long loaded;
};

static struct record *head;

static void note_loaded(struct stats *s)
{
    s->loaded++;
}

static struct record *parse_record(const char *line)
{
    struct record *r = malloc(sizeof *r);
    if (r == NULL)
        return NULL;
    r->id = atoi(line);
    strncpy(r->name, line, sizeof r->name - 1);
    r->next = NULL;
    return r;
}

int load_records(const char *path, struct stats *stats)
{
    char line[128];
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof line, f) != NULL) {
        struct record *r = parse_record(line);
        if (r == NULL)
            break;
        r->next = head;
        head = r;
        note_loaded(stats);
    }
    fclose(f);
    return 0;
}

int main(int argc, char **argv)
{
    struct stats stats = {0};
    if (argc > 1)
        load_records(argv[1], &stats);
    return 0;
}
