#!/bin/sh
# cmake --install puts headers, libraries, tools, spmd.pc and the CMake package
# in place; another project then builds with pkg-config and with find_package.
#   test_install.sh <build dir> <source dir of this test> [ON: spmd has the MPI backend]
set -eu
BUILD=$1 HERE=$2 MPI=${3:-OFF}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cmake --install "$BUILD" --prefix "$TMP/prefix" >/dev/null
for f in include/spmd/spmd.h include/spmd/group.h lib/libspmd.so lib/libspmd.a lib/pkgconfig/spmd.pc \
         lib/cmake/spmd/spmdConfig.cmake lib/pkgconfig/spmdnn.pc lib/libspmdnn.a bin/spmdrun bin/spmd-bench; do
    [ -e "$TMP/prefix/$f" ] || { echo "FAIL: $f not installed"; ls -R "$TMP/prefix"; exit 1; }
done
# Everything below runs without LD_LIBRARY_PATH: installed programs and
# programs built against the install find libspmd.so by their RPATH.
unset LD_LIBRARY_PATH
PC="$TMP/prefix/lib/pkgconfig"
# pkg-config, shared library; and the training stack (static, with its dependencies)
cc "$HERE/hello.c" $(PKG_CONFIG_PATH="$PC" pkg-config --cflags --libs spmd) -o "$TMP/hello_pc"
"$TMP/hello_pc"
cc "$HERE/hello_nn.c" $(PKG_CONFIG_PATH="$PC" pkg-config --cflags --libs spmdnn) -o "$TMP/hello_nn_pc"
(cd "$TMP" && ./hello_nn_pc)
# find_package: spmd::spmd and spmd::spmdnn
cmake -S "$HERE" -B "$TMP/b" -DCMAKE_PREFIX_PATH="$TMP/prefix" >/dev/null
cmake --build "$TMP/b" >/dev/null
"$TMP/b/hello_cmake"
(cd "$TMP" && "$TMP/b/hello_nn_cmake")
# The MPI backend: spmd/mpi.h installed with it only, and spmd.pc / the CMake
# package bring MPI's flags to a program that includes it.
if [ "$MPI" = ON ]; then
    [ -e "$TMP/prefix/include/spmd/mpi.h" ] || { echo "FAIL: spmd/mpi.h not installed"; exit 1; }
    cc "$HERE/hello_mpi.c" $(PKG_CONFIG_PATH="$PC" pkg-config --cflags --libs spmd) -o "$TMP/hello_mpi_pc"
    [ -x "$TMP/b/hello_mpi_cmake" ] || { echo "FAIL: find_package(spmd) did not build hello_mpi"; exit 1; }
    root=; [ "$(id -u)" = 0 ] && root=--allow-run-as-root
    for p in "$TMP/hello_mpi_pc" "$TMP/b/hello_mpi_cmake"; do
        mpirun $root --oversubscribe -np 2 "$p" | grep -q "of 2 over mpi: 2" || { echo "FAIL: $p under mpirun"; exit 1; }
    done
else
    [ ! -e "$TMP/prefix/include/spmd/mpi.h" ] || { echo "FAIL: spmd/mpi.h installed without the MPI backend"; exit 1; }
fi
# the installed tools start
"$TMP/prefix/bin/spmdrun" --version >/dev/null
"$TMP/prefix/bin/spmd-train" --help >/dev/null
"$TMP/prefix/bin/spmdrun" -n 2 --master-port 0 "$TMP/prefix/bin/spmd-bench" -b 8 -e 8 -n 1 -w 0 >/dev/null
echo "PASS: installed spmd builds with pkg-config and find_package; installed programs start without LD_LIBRARY_PATH"
