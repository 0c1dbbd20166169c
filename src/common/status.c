/* status.c — text for status codes, generated from the one X-macro list. */
#include "spmd/status.h"

const char *spmd_status_str(spmd_status s) {
    switch (s) {
#define SPMD__CASE(name, value, text) case name: return text;
        SPMD_STATUS_LIST(SPMD__CASE)
#undef SPMD__CASE
    }
    return "unknown status";
}

const char *spmd_status_name(spmd_status s) {
    switch (s) {
#define SPMD__CASE(name, value, text) case name: return #name;
        SPMD_STATUS_LIST(SPMD__CASE)
#undef SPMD__CASE
    }
    return "SPMD_UNKNOWN";
}
