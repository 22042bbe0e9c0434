/* Reached containers: loading writes the objects a struct points to, never the struct itself
 * (Redis's `db = server.db + i; dictAdd(db->dict, key, val);`). Without the containers the
 * loaded data is unreachable after a restart, so they are persistent too. */
#include <stdlib.h>

struct entry {
    char *key;
    struct entry *next;
};

struct dict {
    struct entry **table;
    long used;
};

struct db {
    struct dict *dict;
    struct dict *expires;
    int id;
};

struct server {
    struct db *db;
    int dbnum;
};

/* Read during loading, but its pointer only leads to reads: not persistent. */
struct config {
    struct dict *defaults;
};

struct server server;

static int dict_add(struct dict *d, char *key)
{
    struct entry *e = malloc(sizeof(*e));
    e->key = key;
    e->next = d->table[0];
    d->table[0] = e;
    d->used++;
    return 0;
}

static int db_add(struct db *db, char *key)
{
    return dict_add(db->dict, key);
}

static long config_size(struct config *c)
{
    return c->defaults->used;
}

int load(char **keys, int n, struct config *c)
{
    struct db *db = server.db;
    for (int i = 0; i < n; i++) {
        db = server.db + i % server.dbnum;
        db_add(db, keys[i]);
    }
    return (int)config_size(c);
}
