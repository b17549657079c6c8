/* SPDX-License-Identifier: MIT */
/*
 * lua_gcra.h - the per-request Redis limiter the benchmarks compare with:
 * GCRA in one key holding the TAT, in microseconds of the server's clock.
 * ARGV: emission interval (us), burst. Returns 0 (admitted) or the wait.
 * One EVALSHA per decision (resil_bench's Redis peer, cluster_bench's
 * side by side).
 */
#ifndef RESIL_BENCH_LUA_GCRA_H
#define RESIL_BENCH_LUA_GCRA_H

static const char lua_gcra[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
    "local interval = tonumber(ARGV[1])\n"
    "local tau = (tonumber(ARGV[2]) - 1) * interval\n"
    "local tat = tonumber(redis.call('GET', KEYS[1]) or now)\n"
    "if tat < now then tat = now end\n"
    "if tat - now > tau then return tat - tau - now end\n"
    "local ntat = tat + interval\n"
    "redis.call('SET', KEYS[1], ntat, 'PX', math.floor((ntat - now) / 1000) + 1)\n"
    "return 0\n";

#endif
