/*
 * What it costs to make a 4 KiB (or SIZE-byte) write to a zero-filled file durable, five
 * ways, one after the other: pwrite + fdatasync; the same through O_DIRECT; an O_DIRECT|O_DSYNC
 * file; pwritev2 with RWF_DSYNC through the page cache; and pwritev2 with RWF_DSYNC on an
 * O_DIRECT file (what the write-ahead file does where the file system allows it). N writes
 * each, back to back at increasing offsets of a 64 MiB file at PATH (removed at the end);
 * prints the 10th, 50th and 90th percentile of each.
 *
 *   cc -O2 bench/probes/wal_direct.c -o /tmp/wal_direct && /tmp/wal_direct /tmp/probe.bin 3000 4096
 *
 * Quoted in docs/design/disk-durability.md, "Direct writes".
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/uio.h>
#include "probe_file.h"
int main(int argc,char**argv){
  const char*path=argv[1]; int n=atoi(argv[2]); size_t sz=argc>3?atoi(argv[3]):4096;
  size_t flen=64<<20;
  zero_file(path,flen);
  int fd;
  char*buf=aligned_alloc(4096,1<<16); memset(buf,7,1<<16);
  double *t=malloc(sizeof(double)*n);
  const char*names[]={"pwrite+fdatasync","O_DIRECT pwrite+fdatasync","O_DIRECT|O_DSYNC pwrite","pwritev2 RWF_DSYNC (buffered)","O_DIRECT pwritev2 RWF_DSYNC"};
  for(int mode=0;mode<5;mode++){
    int fl=O_RDWR; if(mode==1||mode==2||mode==4) fl|=O_DIRECT; if(mode==2) fl|=O_DSYNC;
    fd=open(path,fl);
    off_t off=0;
    for(int i=0;i<n;i++){
      double a=now();
      if(mode==3||mode==4){struct iovec v={buf,sz}; if(pwritev2(fd,&v,1,off,RWF_DSYNC)<0){perror("pwritev2");return 1;}}
      else { if(pwrite(fd,buf,sz,off)<0){perror("pwrite");return 1;} if(mode<2) fdatasync(fd);}
      t[i]=now()-a; off+=sz; if(off+sz>flen) off=0;
    }
    qsort(t,n,sizeof(double),cmp);
    printf("%-32s size %zu: p10 %.0f p50 %.0f p90 %.0f us\n",names[mode],sz,t[n/10],t[n/2],t[n*9/10]);
    close(fd);
  }
  unlink(path); return 0;
}
