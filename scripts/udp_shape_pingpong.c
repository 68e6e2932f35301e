/*
 * Half round trip of a busy-polled UDP ping-pong on loopback (127.0.0.1 <->
 * 127.0.0.2, one thread per end, both spinning on MSG_DONTWAIT receives) for
 * the datagram shapes of issue 19's 2-byte RDMA WRITE latency path (docs/roce.md,
 * "Issue 19 latency, session of 2026-12-04 19:30 UTC"). Not part of any build:
 *   gcc -O2 -o /tmp/udp_shape_pingpong scripts/udp_shape_pingpong.c -lpthread
 *   /tmp/udp_shape_pingpong MODE [ITERS]      (env VLEN=1..64, GRO=0|1)
 * MODE 0: connected send/recv, 2 B (= `bench roce`'s busy-poll UDP floor)
 *      1: unconnected sendto/recvfrom, 36 B (a 2-byte inline RDMA WRITE)
 *      2: sendmmsg of one UDP_SEGMENT=36 GSO datagram of 56 B (WRITE + 20-byte
 *         ACK, what the soft provider sends per half round trip), recvmmsg of
 *         VLEN messages with UDP_GRO (default 16, on)
 *      3: as 2 with one 36-byte datagram, no UDP_SEGMENT
 *      4: sendmmsg of two datagrams (36 B + 20 B) without GSO; the echo waits
 *         for both
 * Prints the p50 half round trip, and the p50 of the measuring side's send
 * call and of its productive receive call.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <arpa/inet.h>
#include <unistd.h>
#include <fcntl.h>
#include <time.h>
#include <errno.h>
#include <stdatomic.h>
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
static int mode; // 0 send/recv connected, 1 sendto/recvfrom unconn, 2 sendmmsg gso 2seg + recvmmsg gro, 3 sendmmsg 1 seg + recvmmsg gro (vlen16), 4 sendmmsg 2 msgs (no gso) + recvmmsg
static int fa, fb; static struct sockaddr_in aa, ab;
static atomic_int stop;
static int vlen = 16; static int gro = 1;
static char bufs[64][65536];
static int xfer_recv(int fd) {
  if (mode <= 1) { char b[64]; struct sockaddr_in s; socklen_t l = sizeof s; int n = recvfrom(fd, b, 64, MSG_DONTWAIT, (struct sockaddr*)&s, &l); return n; }
  struct mmsghdr m[64]; struct iovec iov[64]; char ctl[64][64]; struct sockaddr_in src[64];
  for (int i=0;i<vlen;i++){ iov[i].iov_base=bufs[i]; iov[i].iov_len=65536; memset(&m[i],0,sizeof m[i]); m[i].msg_hdr.msg_iov=&iov[i]; m[i].msg_hdr.msg_iovlen=1; m[i].msg_hdr.msg_control=ctl[i]; m[i].msg_hdr.msg_controllen=64; m[i].msg_hdr.msg_name=&src[i]; m[i].msg_hdr.msg_namelen=sizeof src[i]; }
  int n = recvmmsg(fd, m, vlen, MSG_DONTWAIT, NULL);
  return n;
}
static void xfer_send(int fd, struct sockaddr_in *to) {
  char p[128]; memset(p, 1, sizeof p);
  if (mode == 0) { send(fd, p, 2, 0); return; }
  if (mode == 1) { sendto(fd, p, 36, 0, (struct sockaddr*)to, sizeof *to); return; }
  struct mmsghdr m[2]; struct iovec iov[2]; char ctl[CMSG_SPACE(2)]; memset(m,0,sizeof m);
  if (mode == 2 || mode == 3) {
    iov[0].iov_base = p; iov[0].iov_len = mode == 2 ? 56 : 36;
    m[0].msg_hdr.msg_iov = iov; m[0].msg_hdr.msg_iovlen = 1; m[0].msg_hdr.msg_name = to; m[0].msg_hdr.msg_namelen = sizeof *to;
    if (mode == 2) { m[0].msg_hdr.msg_control = ctl; m[0].msg_hdr.msg_controllen = sizeof ctl; struct cmsghdr *c = CMSG_FIRSTHDR(&m[0].msg_hdr); c->cmsg_level = SOL_UDP; c->cmsg_type = UDP_SEGMENT; c->cmsg_len = CMSG_LEN(2); *(unsigned short*)CMSG_DATA(c) = 36; }
    sendmmsg(fd, m, 1, 0); return;
  }
  for (int i=0;i<2;i++){ iov[i].iov_base=p; iov[i].iov_len = i? 20:36; m[i].msg_hdr.msg_iov=&iov[i]; m[i].msg_hdr.msg_iovlen=1; m[i].msg_hdr.msg_name=to; m[i].msg_hdr.msg_namelen=sizeof *to; }
  sendmmsg(fd, m, 2, 0);
}
static int got(int fd, int need) { // returns once 'need' datagrams (or segments) arrived
  int have = 0; while (have < need) { int n = xfer_recv(fd); if (n > 0) have += (need==2? n : 1); else if (atomic_load_explicit(&stop, memory_order_relaxed)) return -1; }
  return 0;
}
static void *echo(void *x) { int need = (mode == 4 || (mode==2 && !gro)) ? 2 : 1; while (!atomic_load(&stop)) { if (got(fb, need) < 0) break; xfer_send(fb, &aa); } return 0; }
static unsigned long long ns(){ struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec*1000000000ull+t.tv_nsec; }
static int cmp(const void*a,const void*b){ unsigned long long x=*(unsigned long long*)a,y=*(unsigned long long*)b; return x<y?-1:x>y; }
int main(int argc, char **argv) {
  mode = atoi(argv[1]); if (getenv("VLEN")) vlen = atoi(getenv("VLEN")); if (getenv("GRO")) gro = atoi(getenv("GRO")); int iters = argc > 2 ? atoi(argv[2]) : 200000;
  fa = socket(AF_INET, SOCK_DGRAM, 0); fb = socket(AF_INET, SOCK_DGRAM, 0);
  aa.sin_family = ab.sin_family = AF_INET; aa.sin_addr.s_addr = inet_addr("127.0.0.1"); ab.sin_addr.s_addr = inet_addr("127.0.0.2");
  aa.sin_port = htons(47911); ab.sin_port = htons(47912);
  if (bind(fa, (void*)&aa, sizeof aa) || bind(fb, (void*)&ab, sizeof ab)) { perror("bind"); return 1; }
  if (mode == 0) { connect(fa, (void*)&ab, sizeof ab); connect(fb, (void*)&aa, sizeof aa); }
  int one = gro; if (mode >= 2) { setsockopt(fa, SOL_UDP, UDP_GRO, &one, sizeof one); setsockopt(fb, SOL_UDP, UDP_GRO, &one, sizeof one); }
  pthread_t t; pthread_create(&t, 0, echo, 0);
  unsigned long long *s = malloc(iters * sizeof *s);
  int need = mode == 4 ? 2 : 1;
  unsigned long long *ps = malloc(iters*8), *pr = malloc(iters*8);
  for (int i = 0; i < iters; i++) { unsigned long long t0 = ns(); xfer_send(fa, &ab); unsigned long long t1 = ns(); ps[i]=t1-t0;
    int n; unsigned long long r0; int hv=0; do { r0 = ns(); n = xfer_recv(fa); if (n>0) hv += (need==2?n:need); } while (hv < need); pr[i] = ns() - r0; s[i] = ns() - t0; }
  qsort(ps, iters, 8, cmp); qsort(pr, iters, 8, cmp); printf("send p50 %llu ns, productive recv p50 %llu ns\n", ps[iters/2], pr[iters/2]);
  atomic_store(&stop, 1); pthread_join(t, 0);
  qsort(s, iters, sizeof *s, cmp);
  printf("mode %d: half rtt p50 %.3f us, min %.3f\n", mode, s[iters/2]/2000.0, s[0]/2000.0);
}
