# tests/launcher/barrier.py — torchrun's side of the start-up benchmark:
# init_process_group (gloo, env://), one barrier, destroy.
import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
