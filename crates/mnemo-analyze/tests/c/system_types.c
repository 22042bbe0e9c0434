/* Types from system headers are never reported, even when written. */
#include <string.h>
#include <sys/stat.h>
#include <time.h>

struct mine {
    struct stat st;
    int fd;
};

int load(const char *path, struct mine *m, struct stat *st, struct tm *tm)
{
    st->st_size = 0;
    tm->tm_year = 1;
    memset(tm, 0, sizeof *tm);
    m->st.st_mode = 0;
    return stat(path, st);
}
