#!/usr/bin/env bash
# label: unit build
# The segment layout is an ABI between processes of different builds: its
# static_asserts must hold on i386 (-m32) as on x86_64, with the same
# offsets. The public header compiles as C11 -pedantic and as C++.
set -euo pipefail
src=${SRC:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/layout.c" <<'C'
#include <stdio.h>
#include "policy.h"
#define P(t, f) printf(#t "." #f " %zu\n", offsetof(struct t, f))
#define S(t) printf(#t " %zu\n", sizeof(struct t))
int main(void)
{
	S(resil_cfg_hdr); S(resil_state_hdr); S(resil_rec); S(resil_client_row); S(resil_event);
	S(resil_conf); S(resil_permit_priv);
	P(resil_cfg_hdr, hash_k1); P(resil_cfg_hdr, rec_used); P(resil_cfg_hdr, generation);
	P(resil_state_hdr, arena_used); P(resil_state_hdr, event_head); P(resil_state_hdr, reserved);
	P(resil_rec, state_off); P(resil_rec, comp_off); P(resil_rec, conf);
	P(resil_conf, breaker); P(resil_conf, limit); P(resil_conf, bulkhead);
	P(resil_conf, adaptive); P(resil_conf, shed); P(resil_conf, retry);
	P(resil_event, time_ns); P(resil_event, value);
	P(resil_permit_priv, start_ns); P(resil_permit_priv, limit_tat);
	return 0;
}
C
cc -std=gnu11 -D_GNU_SOURCE -I"$src/shm" -I"$src/client" "$tmp/layout.c" -o "$tmp/l64"
"$tmp/l64" >"$tmp/64.txt"
# i386: run the -m32 program where the kernel can; where it cannot (no
# 32-bit exec support, "Exec format error"), compile the x86_64 figures as
# static assertions for -m32, which guards the same ABI without running.
if echo 'int main(void){return 0;}' | cc -m32 -x c - -o "$tmp/t32" 2>/dev/null; then
	cc -m32 -Wno-psabi -std=gnu11 -D_GNU_SOURCE -I"$src/shm" -I"$src/client" "$tmp/layout.c" -o "$tmp/l32"
	if "$tmp/t32" 2>/dev/null; then
		"$tmp/l32" >"$tmp/32.txt"
		if ! diff -u "$tmp/64.txt" "$tmp/32.txt"; then
			echo "FAIL: the segment layout differs between x86_64 and i386"
			exit 1
		fi
		echo "layout identical on x86_64 and i386 ($(wc -l <"$tmp/64.txt") sizes and offsets, run)"
	else
		{
			echo '#include "policy.h"'
			# "resil_rec.state_off 8" -> offsetof; "resil_rec 1024" -> sizeof
			awk '{
				split($1, a, ".");
				e = (a[2] == "") ? "sizeof(struct " a[1] ")" \
						 : "offsetof(struct " a[1] ", " a[2] ")";
				printf "_Static_assert(%s == %s, \"%s differs on i386\");\n", e, $2, $1;
			}' "$tmp/64.txt"
		} >"$tmp/assert32.c"
		if ! cc -m32 -Wno-psabi -std=gnu11 -D_GNU_SOURCE -I"$src/shm" -I"$src/client" -c \
			"$tmp/assert32.c" -o "$tmp/assert32.o"; then
			echo "FAIL: the segment layout differs between x86_64 and i386"
			exit 1
		fi
		echo "layout identical on x86_64 and i386 ($(wc -l <"$tmp/64.txt") sizes and" \
			"offsets, as static assertions: this kernel cannot run i386 programs)"
	fi
else
	echo "note: no -m32 toolchain (gcc-multilib); i386 layout not checked"
fi

echo '#include "resil.h"
int main(void){ resil_permit_t p; (void)p; return RESIL_ADMIT; }' >"$tmp/pub.c"
cc -std=c11 -pedantic -Werror -Wall -Wextra -I"$src/client" -c "$tmp/pub.c" -o "$tmp/pub.o"
cp "$tmp/pub.c" "$tmp/pub.cc"
c++ -std=c++11 -pedantic -Werror -Wall -Wextra -I"$src/client" -c "$tmp/pub.cc" -o "$tmp/pubxx.o"
echo "resil.h compiles as C11 -pedantic and as C++11"
