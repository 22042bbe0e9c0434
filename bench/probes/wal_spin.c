/*
 * What a halted CPU adds to a durable write: an 8 KiB (or SIZE-byte) O_DIRECT pwritev2 with
 * RWF_DSYNC, N times back to back, the writing thread pinned to CPU 0, in four rounds of two
 * modes: "plain" (the CPU idles while the write waits for the disk) and "spinner" (a second
 * thread on CPU 0 calls sched_yield in a loop while the write is in flight, so the CPU never
 * idles and the completion finds it running). Prints the 10th, 50th and 90th percentile of
 * each. On a VM whose guest does not poll before halting (cpuidle haltpoll with
 * guest_halt_poll_ns=0) the spinner's writes were 35-70 us faster in the median.
 *
 *   cc -O2 -pthread bench/probes/wal_spin.c -o /tmp/wal_spin && /tmp/wal_spin /tmp/probe.bin 2000 8192
 *
 * Quoted in crates/mnemo-pmem/src/awake.rs and docs/design/disk-durability.md.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include <sched.h>
#include <sys/uio.h>
#include "probe_file.h"
static volatile int spin_on=0, stop=0;
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
static void*spinner(void*a){pin(0);while(!stop){ if(spin_on) sched_yield(); else usleep(1000);} return 0;}
int main(int argc,char**argv){
  const char*path=argv[1]; int n=atoi(argv[2]); size_t sz=argc>3?atoi(argv[3]):4096;
  pin(0);
  size_t flen=64<<20;
  zero_file(path,flen);
  int fd;
  char*buf=aligned_alloc(4096,1<<16); memset(buf,7,1<<16);
  double *t=malloc(sizeof(double)*n);
  pthread_t th; pthread_create(&th,0,spinner,0);
  for(int round=0;round<4;round++)
  for(int mode=0;mode<2;mode++){
    fd=open(path,O_RDWR|O_DIRECT);
    off_t off=0;
    for(int i=0;i<n;i++){
      double a=now();
      if(mode==1) spin_on=1;
      struct iovec v={buf,sz}; if(pwritev2(fd,&v,1,off,RWF_DSYNC)<0){perror("pwritev2");return 1;}
      spin_on=0;
      t[i]=now()-a; off+=sz; if(off+sz>flen) off=0;
    }
    qsort(t,n,sizeof(double),cmp);
    printf("%-10s size %zu: p10 %.0f p50 %.0f p90 %.0f us\n",mode?"spinner":"plain",sz,t[n/10],t[n/2],t[n*9/10]);
    close(fd);
  }
  stop=1; pthread_join(th,0);
  unlink(path); return 0;
}
