/*
 * libpmemobj heap throughput: the peer of crates/mnemo-bench/src/bin/heap.rs.
 * Run by scripts/bench-heap.sh with PMEM_IS_PMEM_FORCE=1, so the pool on /dev/shm is treated
 * as persistent memory (clwb + sfence, as mnemo flushes tmpfs), not msync.
 *
 * usage: heap <pool path> <ops per thread per run> <runs> <threads>
 *
 * Operations, in this order in every run (each thread works on its own objects):
 *   tx8        TX_BEGIN; pmemobj_tx_add_range 8 B; store 8 B; TX_END (own word, own line)
 *   txalloc64  TX_BEGIN; pmemobj_tx_alloc(64); TX_END    (objects freed untimed afterwards)
 *   alloc64    pmemobj_alloc(64) into a volatile PMEMoid
 *   free64     pmemobj_free of the objects of alloc64
 *   floor2     not a heap operation: the medium's floor for two fences, two lines of the
 *              thread's own each stored (8 B) and pmemobj_persist'ed (flush + drain)
 * A barrier starts all threads together for each operation. The first run is a warm-up
 * (pages faulted in, runs filled) and is not reported.
 *
 * prints one line per operation (medians of the runs):
 *   pmdk,<op>,<threads>,<ops per thread>,<wall ns per op>,<ops per s>,<fences per op>,
 *   <lines per op>,<thread CPU ns per op>
 * Wall: (last thread's end - first thread's start) / (threads * ops), so ops/s is the
 * aggregate. CPU: the threads' summed CPU time / (threads * ops), which excludes other jobs on
 * a shared machine. Fences and lines per op are not counted here: they are libpmemobj's own
 * expectations from its test src/test/obj_persist_count/out1.log.match (tx_add: 3 lines,
 * 3 fences for a whole transaction adding 8 B; tx_alloc: 4 lines, 1 fence; pmalloc_stack
 * i.e. pmemobj_alloc to a volatile destination: 2 lines, 2 fences; pfree_stack: 1 line,
 * 2 fences), stated, not measured; floor2's 2 lines and 2 fences follow from its code.
 */
#include <libpmemobj.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { TX8, TXALLOC, ALLOC, FREE, FLOOR, NOPS };
static const char *op_names[NOPS] = { "tx8", "txalloc64", "alloc64", "free64", "floor2" };
static const char *op_fences[NOPS] = { "3.000", "1.000", "2.000", "2.000", "2.000" };
static const char *op_lines[NOPS] = { "3.000", "4.000", "2.000", "1.000", "2.000" };

#define MAX_THREADS 8
#define MAX_RUNS 100

static PMEMobjpool *pop;
static long n_ops;
static int n_threads;
static pthread_barrier_t barrier;

struct worker {
	int id;
	PMEMoid *oids;
	double start[NOPS], end[NOPS], cpu[NOPS];
};

static double now_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void begin_op(struct worker *w, int op)
{
	pthread_barrier_wait(&barrier);
	w->start[op] = now_ns(CLOCK_MONOTONIC);
	w->cpu[op] = now_ns(CLOCK_THREAD_CPUTIME_ID);
}

static void end_op(struct worker *w, int op)
{
	w->cpu[op] = now_ns(CLOCK_THREAD_CPUTIME_ID) - w->cpu[op];
	w->end[op] = now_ns(CLOCK_MONOTONIC);
}

/* One transaction per call: TX_BEGIN is a setjmp, kept out of the loops' frames. */
static void tx8_one(uint64_t *word, uint64_t value)
{
	TX_BEGIN(pop) {
		pmemobj_tx_add_range_direct(word, sizeof *word);
		*word = value;
	} TX_ONABORT {
		die("tx8");
	} TX_END
}

static void txalloc_one(PMEMoid *oid)
{
	TX_BEGIN(pop) {
		*oid = pmemobj_tx_alloc(64, 1);
	} TX_ONABORT {
		die("pmemobj_tx_alloc");
	} TX_END
}

static void *work(void *arg)
{
	struct worker *w = arg;
	PMEMoid root = pmemobj_root(pop, 2 * 64 * MAX_THREADS);
	uint64_t *word = (uint64_t *)((char *)pmemobj_direct(root) + 64 * w->id);
	uint64_t *other = (uint64_t *)((char *)word + 64 * MAX_THREADS);

	begin_op(w, TX8);
	for (long i = 0; i < n_ops; i++)
		tx8_one(word, (uint64_t)i);
	end_op(w, TX8);

	begin_op(w, TXALLOC);
	for (long i = 0; i < n_ops; i++)
		txalloc_one(&w->oids[i]);
	end_op(w, TXALLOC);
	for (long i = 0; i < n_ops; i++)
		pmemobj_free(&w->oids[i]);

	begin_op(w, ALLOC);
	for (long i = 0; i < n_ops; i++)
		if (pmemobj_alloc(pop, &w->oids[i], 64, 1, NULL, NULL) != 0)
			die("pmemobj_alloc");
	end_op(w, ALLOC);

	begin_op(w, FREE);
	for (long i = 0; i < n_ops; i++)
		pmemobj_free(&w->oids[i]);
	end_op(w, FREE);

	begin_op(w, FLOOR);
	for (long i = 0; i < n_ops; i++) {
		*other = (uint64_t)i;
		pmemobj_persist(pop, other, sizeof *other);
		*word = (uint64_t)i;
		pmemobj_persist(pop, word, sizeof *word);
	}
	end_op(w, FLOOR);
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s <pool> <ops per thread> <runs> <threads>\n", argv[0]);
		return 2;
	}
	const char *path = argv[1];
	n_ops = atol(argv[2]);
	int runs = atoi(argv[3]);
	n_threads = atoi(argv[4]);
	if (n_ops <= 0 || runs <= 0 || runs > MAX_RUNS || n_threads <= 0 ||
	    n_threads > MAX_THREADS) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	unlink(path);
	/* 512 MiB: room for every thread's live 64-byte objects of one operation. */
	pop = pmemobj_create(path, "mnemo-heap-bench", (size_t)512 << 20, 0600);
	if (pop == NULL)
		die("pmemobj_create");
	if (pthread_barrier_init(&barrier, NULL, (unsigned)n_threads) != 0)
		die("pthread_barrier_init");
	struct worker workers[MAX_THREADS];
	for (int t = 0; t < n_threads; t++) {
		workers[t].id = t;
		workers[t].oids = calloc((size_t)n_ops, sizeof(PMEMoid));
		if (workers[t].oids == NULL)
			die("calloc");
	}
	double wall[NOPS][MAX_RUNS], cpu[NOPS][MAX_RUNS];
	for (int r = -1; r < runs; r++) {
		pthread_t tids[MAX_THREADS];
		for (int t = 0; t < n_threads; t++)
			if (pthread_create(&tids[t], NULL, work, &workers[t]) != 0)
				die("pthread_create");
		for (int t = 0; t < n_threads; t++)
			pthread_join(tids[t], NULL);
		if (r < 0)
			continue; /* warm-up */
		for (int op = 0; op < NOPS; op++) {
			double first = workers[0].start[op], last = workers[0].end[op], sum = 0;
			for (int t = 0; t < n_threads; t++) {
				if (workers[t].start[op] < first)
					first = workers[t].start[op];
				if (workers[t].end[op] > last)
					last = workers[t].end[op];
				sum += workers[t].cpu[op];
			}
			double total = (double)n_ops * n_threads;
			wall[op][r] = (last - first) / total;
			cpu[op][r] = sum / total;
		}
	}
	for (int op = 0; op < NOPS; op++) {
		qsort(wall[op], (size_t)runs, sizeof(double), cmp);
		qsort(cpu[op], (size_t)runs, sizeof(double), cmp);
		double ns = wall[op][runs / 2];
		printf("pmdk,%s,%d,%ld,%.1f,%.0f,%s,%s,%.1f\n", op_names[op], n_threads, n_ops, ns,
		       1e9 / ns, op_fences[op], op_lines[op], cpu[op][runs / 2]);
	}
	for (int t = 0; t < n_threads; t++)
		free(workers[t].oids);
	pthread_barrier_destroy(&barrier);
	pmemobj_close(pop);
	unlink(path);
	return 0;
}
