/*
 * A persistent hash table of strings on mnemo (in the style of Mnemosyne's example): every
 * insert and delete is one durable transaction, so after a crash at any moment the table is
 * exactly as after some prefix of the operations.
 *
 *   hashtable POOL put KEY VALUE    insert or replace
 *   hashtable POOL get KEY          print the value (exit 3 if absent)
 *   hashtable POOL del KEY          delete (exit 3 if absent)
 *   hashtable POOL count            print the number of entries
 *   hashtable POOL run [LIMIT]      run the deterministic workload from where it stopped,
 *                                   printing the number of operations done after each commit
 *   hashtable POOL verify [ACKED]   check the invariants, and that the table equals the
 *                                   workload's model after the operations recorded as done
 *                                   (at least ACKED of them)
 */
#include <mnemo.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXAMPLE "hashtable"
#include "try.h"

#define BUCKETS 61          /* few, so chains form */
#define KEYS 300            /* key space of the workload */
#define VALUE_MAX 128
#define ROOT_MAGIC 0x4854424c4d4e4d4fULL /* "OMNMLBTH" */

struct root {
    uint64_t magic;
    uint64_t buckets;   /* offset of uint64_t[BUCKETS]: node offsets, 0 = empty */
    uint64_t count;     /* entries */
    uint64_t ops_done;  /* workload operations applied (same transaction as each) */
};

struct node {
    uint64_t next;      /* offset of the next node in the chain, 0 = end */
    uint32_t key_len;
    uint32_t value_len;
    char bytes[];       /* key, then value (no NULs) */
};

static mnemo_pool *pool;
static struct root *root;
static uint64_t root_off;

static void *at(uint64_t off)
{
    void *p = mnemo_direct(pool, off);
    if (p == NULL)
        fail("mnemo_direct", MNEMO_EINVAL);
    return p;
}

static uint64_t hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h % BUCKETS;
}

static void open_table(const char *path)
{
    int rc = mnemo_pool_open(path, &pool);
    if (rc == MNEMO_ENOENT)
        rc = mnemo_pool_create(path, 8 << 20, 0, &pool);
    if (rc != MNEMO_OK)
        fail("open or create the pool", rc);
    void *p;
    TRY(mnemo_root(pool, "hashtable", sizeof(struct root), &p));
    root = p;
    root_off = mnemo_offset(pool, root);
    if (root->magic == ROOT_MAGIC)
        return;
    /* First use: bucket array and magic in one transaction. */
    mnemo_tx *tx;
    uint64_t buckets;
    uint64_t magic = ROOT_MAGIC;
    TRY(mnemo_tx_begin(pool, &tx));
    TRY(mnemo_tx_alloc(tx, BUCKETS * sizeof(uint64_t), &buckets));
    TRY(mnemo_tx_write(tx, root_off + offsetof(struct root, buckets), &buckets, 8));
    TRY(mnemo_tx_write(tx, root_off + offsetof(struct root, magic), &magic, 8));
    TRY(mnemo_tx_commit(tx));
}

/* The link (bucket slot or node's next field) that points at KEY's node, or at the end. */
static uint64_t find_link(const char *key, size_t key_len, uint64_t *node_off)
{
    uint64_t link = root->buckets + 8 * hash(key, key_len);
    for (;;) {
        uint64_t cur = *(uint64_t *)at(link);
        *node_off = cur;
        if (cur == 0)
            return link;
        struct node *n = at(cur);
        if (n->key_len == key_len && memcmp(n->bytes, key, key_len) == 0)
            return link;
        link = cur + offsetof(struct node, next);
    }
}

static void count_add(mnemo_tx *tx, int64_t delta)
{
    uint64_t c = root->count + (uint64_t)delta;
    TRY(mnemo_tx_write(tx, root_off + offsetof(struct root, count), &c, 8));
}

/* Insert or replace within TX (one operation per transaction: plain loads are current). */
static void put(mnemo_tx *tx, const char *key, const char *value)
{
    size_t kl = strlen(key), vl = strlen(value);
    uint64_t old;
    uint64_t link = find_link(key, kl, &old);
    uint64_t fresh;
    size_t size = sizeof(struct node) + kl + vl;
    TRY(mnemo_tx_alloc(tx, size, &fresh));
    struct node *n = malloc(size);
    n->next = old ? ((struct node *)at(old))->next : *(uint64_t *)at(link);
    n->key_len = (uint32_t)kl;
    n->value_len = (uint32_t)vl;
    memcpy(n->bytes, key, kl);
    memcpy(n->bytes + kl, value, vl);
    TRY(mnemo_tx_write(tx, fresh, n, size)); /* new object: written in place, not logged */
    free(n);
    TRY(mnemo_tx_write(tx, link, &fresh, 8));
    if (old)
        TRY(mnemo_tx_free(tx, old));
    else
        count_add(tx, 1);
}

static int del(mnemo_tx *tx, const char *key)
{
    uint64_t node;
    uint64_t link = find_link(key, strlen(key), &node);
    if (node == 0)
        return 0;
    uint64_t next = ((struct node *)at(node))->next;
    TRY(mnemo_tx_write(tx, link, &next, 8));
    TRY(mnemo_tx_free(tx, node));
    count_add(tx, -1);
    return 1;
}

static int get(const char *key, char *out)
{
    uint64_t node;
    find_link(key, strlen(key), &node);
    if (node == 0)
        return 0;
    struct node *n = at(node);
    memcpy(out, n->bytes + n->key_len, n->value_len);
    out[n->value_len] = 0;
    return 1;
}

/* The workload: operation i inserts or deletes one key; values vary in length. */
static int op_key(uint64_t i) { return (int)((i * 7919) % KEYS); }
static int op_is_delete(uint64_t i) { return i % 4 == 3; }
static void key_name(int k, char *out) { sprintf(out, "key-%d", k); }
static void value_of(uint64_t i, char *out)
{
    int pad = (int)(i % 40);
    int n = sprintf(out, "value-%llu-", (unsigned long long)i);
    memset(out + n, 'x', pad);
    out[n + pad] = 0;
}

static void run(uint64_t limit)
{
    for (uint64_t i = root->ops_done; i < limit; i++) {
        char key[32], value[VALUE_MAX];
        key_name(op_key(i), key);
        mnemo_tx *tx;
        TRY(mnemo_tx_begin(pool, &tx));
        if (op_is_delete(i)) {
            del(tx, key);
        } else {
            value_of(i, value);
            put(tx, key, value);
        }
        uint64_t done = i + 1;
        TRY(mnemo_tx_write(tx, root_off + offsetof(struct root, ops_done), &done, 8));
        TRY(mnemo_tx_commit(tx));
        printf("%llu\n", (unsigned long long)done); /* acknowledged */
        fflush(stdout);
    }
}

static int verify(uint64_t acked)
{
    int errors = 0;
    uint64_t done = root->ops_done;
    if (done < acked) {
        fprintf(stderr, "verify: %llu operations recorded, %llu were acknowledged\n",
                (unsigned long long)done, (unsigned long long)acked);
        errors++;
    }
    /* The model: the last operation on each key. */
    static int64_t last[KEYS];
    for (int k = 0; k < KEYS; k++)
        last[k] = -1;
    for (uint64_t i = 0; i < done; i++)
        last[op_key(i)] = op_is_delete(i) ? -1 : (int64_t)i;
    /* Structure: every node in its key's bucket, no duplicates, count right. */
    uint64_t nodes = 0;
    uint64_t *slots = at(root->buckets);
    for (int b = 0; b < BUCKETS; b++) {
        for (uint64_t cur = slots[b]; cur != 0; cur = ((struct node *)at(cur))->next) {
            struct node *n = at(cur);
            if (n->key_len == 0 || n->key_len > 31 || n->value_len >= VALUE_MAX) {
                fprintf(stderr, "verify: node %#llx has lengths %u/%u\n",
                        (unsigned long long)cur, n->key_len, n->value_len);
                return 1;
            }
            if (hash(n->bytes, n->key_len) != (uint64_t)b) {
                fprintf(stderr, "verify: node %#llx in bucket %d of another key\n",
                        (unsigned long long)cur, b);
                errors++;
            }
            if (++nodes > root->count + 1000) {
                fprintf(stderr, "verify: a chain does not end\n");
                return 1;
            }
        }
    }
    if (nodes != root->count) {
        fprintf(stderr, "verify: %llu nodes, count says %llu\n", (unsigned long long)nodes,
                (unsigned long long)root->count);
        errors++;
    }
    uint64_t expected = 0;
    for (int k = 0; k < KEYS; k++) {
        char key[32], got[VALUE_MAX], want[VALUE_MAX];
        key_name(k, key);
        int present = get(key, got);
        if (last[k] < 0) {
            if (present) {
                fprintf(stderr, "verify: %s present, the model deleted it\n", key);
                errors++;
            }
            continue;
        }
        expected++;
        value_of((uint64_t)last[k], want);
        if (!present || strcmp(got, want) != 0) {
            fprintf(stderr, "verify: %s = %s, the model says %s\n", key,
                    present ? got : "(absent)", want);
            errors++;
        }
    }
    if (expected != nodes) {
        fprintf(stderr, "verify: %llu entries, the model has %llu\n",
                (unsigned long long)nodes, (unsigned long long)expected);
        errors++;
    }
    if (errors == 0)
        printf("verify: ok: %llu operations, %llu entries\n", (unsigned long long)done,
               (unsigned long long)nodes);
    return errors ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: hashtable POOL put|get|del|count|run|verify ...\n");
        return 64;
    }
    open_table(argv[1]);
    const char *cmd = argv[2];
    int status = 0;
    if (strcmp(cmd, "put") == 0 && argc == 5) {
        mnemo_tx *tx;
        TRY(mnemo_tx_begin(pool, &tx));
        put(tx, argv[3], argv[4]);
        TRY(mnemo_tx_commit(tx));
    } else if (strcmp(cmd, "del") == 0 && argc == 4) {
        mnemo_tx *tx;
        TRY(mnemo_tx_begin(pool, &tx));
        int found = del(tx, argv[3]);
        TRY(mnemo_tx_commit(tx));
        status = found ? 0 : 3;
    } else if (strcmp(cmd, "get") == 0 && argc == 4) {
        char value[4096];
        if (strlen(argv[3]) < 256 && get(argv[3], value))
            printf("%s\n", value);
        else
            status = 3;
    } else if (strcmp(cmd, "count") == 0) {
        printf("%llu\n", (unsigned long long)root->count);
    } else if (strcmp(cmd, "run") == 0) {
        run(argc > 3 ? strtoull(argv[3], NULL, 10) : UINT64_MAX);
    } else if (strcmp(cmd, "verify") == 0) {
        status = verify(argc > 3 ? strtoull(argv[3], NULL, 10) : 0);
    } else {
        fprintf(stderr, "hashtable: unknown command %s\n", cmd);
        status = 64;
    }
    TRY(mnemo_pool_close(pool));
    return status;
}
