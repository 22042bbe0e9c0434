/*
 * What the write probes share (wal_direct.c, wal_spin.c): a clock in microseconds, a
 * comparison for qsort, and the file they write to, created at LEN bytes of written zeros
 * and synced, so that later writes change no file metadata.
 */
#ifndef MNEMO_PROBE_FILE_H
#define MNEMO_PROBE_FILE_H
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
static void zero_file(const char*path,size_t len){
  int fd=open(path,O_RDWR|O_CREAT|O_TRUNC,0600);
  char*z=aligned_alloc(4096,1<<20); memset(z,0,1<<20);
  for(size_t o=0;o<len;o+=1<<20) pwrite(fd,z,1<<20,o);
  fsync(fd); close(fd); free(z);
}
#endif
