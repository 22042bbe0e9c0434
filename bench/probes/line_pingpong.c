/*
 * What one cache line costs to move between two CPUs: two threads, pinned to CPUs 0 and 1,
 * take turns incrementing one word (each waits until the word's parity says it is its turn),
 * so every increment fetches the line from the other CPU. Prints the time per hand-over.
 * A second figure: each thread does an atomic fetch_add on one shared word between short
 * spins, alone and then both at once (the cost of a contended locked instruction).
 *
 *   cc -O2 -pthread bench/probes/line_pingpong.c -o /tmp/line_pingpong && /tmp/line_pingpong
 *
 * Quoted in docs/design/heap-and-transactions.md, refinement 11 (55-60 ns here).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define ROUNDS 2000000

static _Alignas(128) volatile uint64_t turn;
static _Alignas(128) uint64_t shared;

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void *ping(void *arg)
{
	uint64_t me = (uint64_t)(uintptr_t)arg;
	pin((int)me);
	for (long i = 0; i < ROUNDS; i++) {
		while ((turn & 1) != me)
			;
		__atomic_fetch_add(&turn, 1, __ATOMIC_SEQ_CST);
	}
	return NULL;
}

static void *add(void *arg)
{
	pin((int)(uintptr_t)arg);
	for (long i = 0; i < ROUNDS; i++) {
		__atomic_fetch_add(&shared, 1, __ATOMIC_SEQ_CST);
		for (volatile int k = 0; k < 50; k++)
			;
	}
	return NULL;
}

static double run(void *(*fn)(void *), int threads)
{
	pthread_t t[2];
	double start = now();
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, fn, (void *)(uintptr_t)i);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	return now() - start;
}

int main(void)
{
	printf("line hand-over between CPU 0 and 1: %.1f ns\n", run(ping, 2) / (2.0 * ROUNDS));
	printf("fetch_add + short spin, 1 thread: %.1f ns per op\n", run(add, 1) / ROUNDS);
	printf("fetch_add + short spin, 2 threads on one word: %.1f ns per op and thread\n",
	       run(add, 2) / ROUNDS);
	return 0;
}
