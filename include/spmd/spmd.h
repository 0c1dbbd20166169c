/* spmd/spmd.h — the whole communication library in one include:
 * status codes, the rendezvous store, process groups (point-to-point,
 * collectives, subgroups, spawn), the DDP gradient reducer and RPC.
 * The training stack has its own headers (spmd/nn.h, spmd/data.h). */
#ifndef SPMD_SPMD_H
#define SPMD_SPMD_H

#include "spmd/status.h"
#include "spmd/store.h"
#include "spmd/group.h"
#include "spmd/ddp.h"
#include "spmd/elastic.h"
#include "spmd/rpc.h"

#endif
