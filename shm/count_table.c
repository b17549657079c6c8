/* SPDX-License-Identifier: MIT */
/*
 * count_table.c - the calling thread's stripe of its process's count
 * table (count_table.h): written by the thread only, read by the
 * decision path's counts (count_table.h) and taken by libresil
 * (client/counts.c).
 */
#include "count_table.h"

_Thread_local __attribute__((tls_model("initial-exec"))) uint64_t resil_count_stripe_off;
