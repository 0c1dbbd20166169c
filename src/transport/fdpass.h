/* src/group/fdpass.h — pass a file descriptor to other local processes over
 * abstract Unix sockets (SCM_RIGHTS), checking who asks (SO_PEERCRED).
 *
 *   owner:  lfd = spmd__fdpass_listen(nonce, backlog)
 *           ... peers connect ...
 *           spmd__fdpass_serve(lfd, fd, tag, pids, npids, deadline)
 *   peer:   c = spmd__fdpass_connect(owner_pid, nonce)
 *           fd = spmd__fdpass_receive(c, &tag, deadline)
 *
 * A connection queues in the listener's backlog, so every process can first
 * connect to all the others, then serve, then receive, on one thread. */
#ifndef SPMD_GROUP_FDPASS_H
#define SPMD_GROUP_FDPASS_H

#include <stdint.h>

/* A listening socket for this process and nonce, or -1. */
int spmd__fdpass_listen(uint64_t nonce, int backlog);
/* Connect to process pid's listener for nonce; -1 when there is none
 * reachable (another network namespace, or it is gone). */
int spmd__fdpass_connect(int pid, uint64_t nonce);
/* Accept until each of the npids processes (<= 256) has been sent fd with
 * tag; connections from any other process are closed unanswered.  1 on
 * success, 0 on failure or at the deadline (absolute, ms; < 0: none). */
int spmd__fdpass_serve(int lfd, int fd, uint32_t tag, const int *pids, int npids, int64_t deadline);
/* The descriptor sent on connection cfd (close-on-exec) and its tag, or -1. */
int spmd__fdpass_receive(int cfd, uint32_t *tag, int64_t deadline);

#endif
