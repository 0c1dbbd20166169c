#!/bin/sh
# cmake --install puts headers, libraries, tools, spmd.pc and the CMake package
# in place; another project then builds with pkg-config and with find_package.
#   test_install.sh <build dir> <source dir of this test>
set -eu
BUILD=$1 HERE=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cmake --install "$BUILD" --prefix "$TMP/prefix" >/dev/null
for f in include/spmd/spmd.h include/spmd/group.h lib/libspmd.so lib/libspmd.a lib/pkgconfig/spmd.pc \
         lib/cmake/spmd/spmdConfig.cmake bin/spmdrun bin/spmd-bench; do
    [ -e "$TMP/prefix/$f" ] || { echo "FAIL: $f not installed"; ls -R "$TMP/prefix"; exit 1; }
done
# pkg-config, shared library
PKG_CONFIG_PATH="$TMP/prefix/lib/pkgconfig" cc "$HERE/hello.c" \
    $(PKG_CONFIG_PATH="$TMP/prefix/lib/pkgconfig" pkg-config --cflags --libs spmd) -o "$TMP/hello_pc"
LD_LIBRARY_PATH="$TMP/prefix/lib" "$TMP/hello_pc"
# find_package
cmake -S "$HERE" -B "$TMP/b" -DCMAKE_PREFIX_PATH="$TMP/prefix" >/dev/null
cmake --build "$TMP/b" >/dev/null
LD_LIBRARY_PATH="$TMP/prefix/lib" "$TMP/b/hello_cmake"
echo "PASS: installed spmd builds with pkg-config and find_package"
