#!/usr/bin/env python3
"""Every C code block of the documentation compiles against today's headers
(issue 12, point 13): ```c blocks of README.md and docs/*.md, and the ```c
blocks inside the comments of include/spmd/*.h (written "* ```c" ... "* ```").

A block with #include lines or a function definition is compiled as a file
of its own (the public headers included first when it has none); any other
block is a fragment and becomes the body of a function.  Warnings are errors
(except unused names, which fragments have by nature).

spmd/mpi.h includes MPI's mpi.h: blocks that include it are compiled with
the MPI flags given after SOURCE_DIR (the build's, when SPMD_WITH_MPI is on)
and skipped without them; the others never see it.

Usage: compile_doc_blocks.py CC SOURCE_DIR [MPI compile flags...]"""
import glob
import os
import re
import subprocess
import sys
import tempfile

CC, ROOT, MPI_FLAGS = sys.argv[1], sys.argv[2], sys.argv[3:]
HEADERS = "".join(f"#include <spmd/{os.path.basename(h)}>\n"
                  for h in sorted(glob.glob(os.path.join(ROOT, "include", "spmd", "*.h")))
                  if os.path.basename(h) != "mpi.h")
HEADERS = "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n" + HEADERS
FLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-variable", "-Wno-unused-function",
         "-Wno-unused-but-set-variable", "-Wno-unused-parameter", "-D_POSIX_C_SOURCE=200809L",
         "-I", os.path.join(ROOT, "include"), "-fsyntax-only", "-x", "c"]


def markdown_blocks(path):
    blocks, cur, start = [], None, 0
    for no, line in enumerate(open(path, encoding="utf-8"), 1):
        if cur is None and re.match(r"^\s*```c\s*$", line):
            cur, start = [], no
        elif cur is not None and re.match(r"^\s*```\s*$", line):
            blocks.append((start, "".join(cur)))
            cur = None
        elif cur is not None:
            cur.append(line)
    return blocks


def header_blocks(path):   # inside comments: " *   ```c" ... " *   ```"
    blocks, cur, start, indent = [], None, 0, 0
    for no, line in enumerate(open(path, encoding="utf-8"), 1):
        m = re.match(r"^ \*( *)```(c?)\s*$", line)
        if m and cur is None and m.group(2) == "c":
            cur, start, indent = [], no, len(m.group(1))
        elif m and cur is not None:
            blocks.append((start, "".join(cur)))
            cur = None
        elif cur is not None:
            body = re.sub(r"^ \*", "", line.rstrip("\n"))
            cur.append(body[indent:] + "\n")
    return blocks


def translation_unit(code):
    if re.search(r"^#include", code, re.M):
        return code
    if re.search(r"^[A-Za-z_][\w \*]*\([^;]*\)\s*\{", code, re.M):   # a function definition
        return HEADERS + code
    return HEADERS + "void spmd_doc_fragment(void) {\n" + code + "}\n"


sources = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
found, failed = 0, 0
with tempfile.TemporaryDirectory() as tmp:
    for path, blocks in [(p, markdown_blocks(p)) for p in sources] + \
            [(p, header_blocks(p)) for p in sorted(glob.glob(os.path.join(ROOT, "include", "spmd", "*.h")))]:
        for start, code in blocks:
            found += 1
            where = f"{os.path.relpath(path, ROOT)}:{start}"
            mpi = "spmd/mpi.h" in code
            if mpi and not MPI_FLAGS:
                print(f"skipped: {where} (uses spmd/mpi.h; this build has no MPI)")
                continue
            src = os.path.join(tmp, f"block{found}.c")
            open(src, "w").write(translation_unit(code))
            r = subprocess.run([CC, *FLAGS, *(MPI_FLAGS if mpi else []), src], capture_output=True, text=True)
            if r.returncode != 0:
                failed += 1
                print(f"FAIL: the code block at {where} does not compile:\n{r.stderr}")
            else:
                print(f"ok: {where}")
# the blocks this test was written for must still be found
if found < 3:
    print(f"FAIL: only {found} C code block(s) found; expected README's, docs/STORE.md's and ddp.h's")
    failed += 1
sys.exit(1 if failed else 0)
