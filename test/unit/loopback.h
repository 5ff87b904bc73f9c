/* A blocking client on loopback for the unit tests that run a real
 * server (sweep.h's allocation sweeps, test_loop.c): the monotonic clock
 * in seconds, and a connection to 127.0.0.1 whose every wait is bounded.
 */
#ifndef TERN_TEST_LOOPBACK_H
#define TERN_TEST_LOOPBACK_H

#include <arpa/inet.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static inline double sweep_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A blocking connection to 127.0.0.1:port, or -1. Every wait on it is
 * bounded at 2 s: a failure inside the server must never leave the
 * client hanging. */
static inline int sweep_connect(int port) {
  struct sockaddr_in sa;
  struct timeval tv = {2, 0};
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

#endif
