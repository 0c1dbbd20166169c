# The flight recorder (issue 13 point 4): the record format and the diagnosis
# (unit), the records written by a failing group (mp), spmdrun's diagnosis of
# a forced hang and its SIGUSR1 dump (launcher).  The parser's fuzz harness is
# in fuzz.cmake.
spmd_test(test_flight_record SOURCES unit/test_flight_record.c LABELS unit TIMEOUT 30)
