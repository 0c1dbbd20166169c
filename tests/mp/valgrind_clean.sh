#!/bin/sh
# Every rank of a group that inits, talks and destroys must end with no leak
# and no memory error (valgrind follows the forked ranks).
#   valgrind_clean.sh <program> [args]
command -v valgrind >/dev/null 2>&1 || { echo "SKIP: valgrind not installed"; exit 77; }
exec valgrind --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=9 -q "$@"
