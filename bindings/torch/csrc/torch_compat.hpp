// torch_compat.hpp — what differs between the torch versions spmd_torch
// builds against (Debian 12's torch 1.13, Debian 13's 2.6), in one place.
//
// torch 1.x: a backend is a c10d::ProcessGroup subclass; the creator
// registered with Backend.register_backend returns it and it is the group.
// torch 2.x: a backend is a c10d::Backend (one per device type) that torch
// wraps in its own ProcessGroup, which carries the group's name (functional
// collectives and DeviceMesh look groups up by it) and dispatches each op to
// the backend registered for the tensors' device (_get_backend(cpu)).  The
// operations' signatures are the same in both.
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#define SPMD_TORCH_BACKEND_API 1
namespace spmd_torch {
using BackendBase = c10d::Backend;
}
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#define SPMD_TORCH_BACKEND_API 0
namespace spmd_torch {
using BackendBase = c10d::ProcessGroup;
}
#endif
