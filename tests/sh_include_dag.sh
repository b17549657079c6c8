#!/usr/bin/env bash
# label: unit build
# The includes of shm/, client/, daemon/ and proto/ follow the arrows of
# ARCHITECTURE.md. The rule, checked here:
#   1. files: the graph "file -> header it includes" is a DAG (tsort);
#   2. folders: shm -> shm and client/resil.h (the public contract) only;
#      client -> client, shm, proto; daemon -> daemon, shm, proto and
#      client/resil.h (never the library's internals); proto -> nothing;
#   3. layers inside shm: each file has a layer (the table below, the same
#      as ARCHITECTURE.md's) and includes shm headers of its own layer or
#      below, never above: the value parsers and the configuration types
#      sit under every component, the dispatcher (conf.c) and the
#      composition (policy.c, metrics.c) over them, so a component can
#      never include the dispatcher that includes it;
#   4. layers inside daemon: each file has a layer (the second table, the
#      same as ARCHITECTURE.md's) and includes daemon headers of its own
#      layer or below: base (log, notify, http, journal, procfs) knows no
#      daemon state; the contracts (resild.h, cfgfile.h, loop.h: the state
#      object and the loop's submissions) sit under everything that works
#      on it; the segment move and the cluster reach only those; the
#      services (clients, events, owners, ctl, the files) over them; the
#      loop's driver (loop.c, loop_conn.c), which calls into the services, over them;
#      main.c on top;
#   5. every .c of shm/, client/ and daemon/ is named in a CMakeLists.txt
#      (sources are listed, never globbed);
#   6. modules inside shm: a module is a file, its header and its _priv.h
#      (breaker.h, breaker.c, breaker_priv.h and the breaker_*.c that have
#      no header of their own; limit_global.c has limit_global.h, so it is
#      a module of its own), and the graph "module -> module it includes"
#      is a DAG too: a contract's header and the file that implements it
#      above the components (seg.h and seg_records.c) would close a circle
#      no file-level check sees;
#   7. calls between the daemon's modules: their circles are the ones
#      ARCHITECTURE.md states ("Circles of calls that remain"), the table
#      dcircles= below; an unstated circle fails, and so does a stated one
#      the code no longer has. Read from the build's objects (BIN): the
#      symbols each file defines and those it calls (calls to inline
#      functions and through pointers are not seen).
# A file new to shm/ or daemon/ must be given a layer here (a file listed
# that does not exist yet is no error). The script checks its own teeth
# first: trees with a cycle, a layer inverted in shm/ and in daemon/, a
# daemon file without a layer, a forbidden folder arrow, a circle of
# modules in shm/ and an unstated circle of calls in daemon/ must fail.
set -euo pipefail
src=${SRC:-$(cd "$(dirname "$0")/.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# layer  files of shm/
layers='
0 common.h common.c clock.c pcpu.h parse.h parse.c conf_types.h names.h names.c
1 seg.h seg_priv.h seg.c seg_reuse.c seg_event.c decision.h comp.h count_table.h count_table.c
2 stats.h stats.c breaker.h breaker.c breaker_conf.c breaker_priv.h breaker_probe.c breaker_maint.c
2 limit.h limit.c limit_priv.h limit_keyed.c limit_maint.c limit_conf.c
2 limit_global.h limit_global.c
2 bulkhead.h bulkhead.c bulkhead_priv.h bulkhead_conf.c bulkhead_maint.c
2 adaptive.h adaptive.c shed.h shed.c
2 budget.h retry.c budget.c counter.h counter.c
3 comp.c conf.h conf.c policy.h policy.c seg_records.h seg_records.c metrics.h metrics.c
'

# layer  files of daemon/
dlayers='
0 log.h log.c notify.h notify.c http.h http.c journal.h journal.c procfs.h procfs.c
1 resild.h cfgfile.h loop.h
2 segmove.h segmove.c
2 cluster.h cluster_priv.h cluster_budget.h cluster_bulkhead.h cluster_keyed.h
2 cluster.c cluster_conn.c cluster_lease.c cluster_breaker.c cluster_bulkhead.c
2 cluster_budget.c cluster_keyed.c cluster_host.c cluster_rc.c
3 clients.h clients.c counts.h counts.c events.h events.c owners.h owners.c ctl.h ctl.c
3 ctl_priv.h ctl_info.c ctl_policy.c ctl_status.c
3 cfgfile.c options.h options.c
4 loop_priv.h loop.c loop_conn.c
5 main.c
'

# The daemon's circles of calls between modules, each a line of its
# modules sorted (ARCHITECTURE.md, "Circles of calls that remain").
dcircles='
daemon/cfgfile daemon/options daemon/owners
daemon/clients daemon/counts daemon/ctl daemon/events daemon/loop
daemon/cluster daemon/cluster_bulkhead
'

# The folder of the file an include names: its own folder first, then the
# include path of the build (shm, client, daemon), proto for the header
# protoc-c generates.
resolve() { # root dir name: sets to
	local d
	to="?/$3"
	if [ "$3" = resil.pb-c.h ]; then
		to=proto/resil.proto
		return
	fi
	for d in "$2" shm client daemon; do
		if [ -f "$1/$d/$3" ]; then
			to="$d/$3"
			return
		fi
	done
}

declare -A layer
while read -r n files; do
	for f in $files; do
		layer[shm/$f]=$n
	done
done <<<"$layers"
while read -r n files; do
	for f in $files; do
		layer[daemon/$f]=$n
	done
done <<<"$dlayers"

# The module of a file: its name without .c/.h and _priv, cut at its last
# underscores until a header of that name exists (breaker_probe.c ->
# breaker), else the name itself.
module_of() { # root path: sets mod
	local d=${2%/*} s m
	s=${2##*/}
	s=${s%.*}
	s=${s%_priv}
	m=$s
	while [ ! -f "$1/$d/$m.h" ]; do
		case $m in
		*_*) m=${m%_*} ;;
		*)
			m=$s
			break
			;;
		esac
	done
	mod=$d/$m
}

# Lines "a b" of a graph -> each circle (a strongly connected set of more
# than one node: Tarjan's), its members sorted, one per line.
circles() {
	awk '
	function visit(v,   i, w, k, j, x, s, memb) {
		idx[v] = low[v] = ++n
		stack[++sp] = v
		on[v] = 1
		for (i = 1; i <= deg[v]; i++) {
			w = adj[v, i]
			if (!(w in idx)) {
				visit(w)
				if (low[w] < low[v])
					low[v] = low[w]
			} else if (on[w] && idx[w] < low[v]) {
				low[v] = idx[w]
			}
		}
		if (low[v] != idx[v])
			return
		k = 0
		do {
			w = stack[sp--]
			on[w] = 0
			memb[++k] = w
		} while (w != v)
		if (k < 2)
			return
		for (i = 2; i <= k; i++) {
			x = memb[i]
			for (j = i - 1; j > 0 && memb[j] > x; j--)
				memb[j + 1] = memb[j]
			memb[j + 1] = x
		}
		s = memb[1]
		for (i = 2; i <= k; i++)
			s = s " " memb[i]
		print s
	}
	$1 != $2 && !(($1, $2) in seen) {
		seen[$1, $2] = 1
		adj[$1, ++deg[$1]] = $2
		node[$1]
		node[$2]
	}
	END { for (v in node) if (!(v in idx)) visit(v) }' | sort
}

check() { # root: prints each broken rule, fails if any
	local root=$1 bad=0 f dir inc to from_dir to_dir
	: >"$tmp/edges"
	while IFS= read -r f; do
		dir=${f%%/*}
		echo "$f $f" >>"$tmp/edges"
		while IFS= read -r inc; do
			resolve "$root" "$dir" "$inc"
			echo "$f $to" >>"$tmp/edges"
		done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' \
			"$root/$f")
	done < <(cd "$root" && find shm client daemon -name '*.[ch]' 2>/dev/null | sort)

	# 1. a DAG of files
	if ! tsort "$tmp/edges" >/dev/null 2>"$tmp/tsort"; then
		echo "include cycle among: $(grep -v 'input contains a loop' "$tmp/tsort" |
			sed 's/^tsort: //' | tr '\n' ' ')"
		bad=1
	fi
	while read -r f to; do
		[ "$f" = "$to" ] && continue
		from_dir=${f%%/*}
		to_dir=${to%%/*}
		# 2. folder arrows
		case "$from_dir>$to" in
		shm\>shm/* | shm\>client/resil.h) ;;
		client\>client/* | client\>shm/* | client\>proto/*) ;;
		daemon\>daemon/* | daemon\>shm/* | daemon\>proto/* | daemon\>client/resil.h) ;;
		*)
			echo "$f includes $to: $from_dir/ may not include that"
			bad=1
			;;
		esac
		# 3, 4. layers inside shm and inside daemon (every file has one:
		# checked below)
		if [ "$from_dir" = "$to_dir" ] && { [ "$from_dir" = shm ] || [ "$from_dir" = daemon ]; }; then
			local lf lt
			lf=${layer[$f]:-}
			lt=${layer[$to]:-}
			if [ -n "$lf" ] && [ -n "$lt" ] && [ "$lt" -gt "$lf" ]; then
				echo "$f (layer $lf) includes $to (layer $lt): an arrow up"
				bad=1
			fi
		fi
	done <"$tmp/edges"
	# 6. a DAG of modules in shm
	local mod mf c
	while read -r f to; do
		[ "${f%%/*}/${to%%/*}" = shm/shm ] || continue
		module_of "$root" "$f"
		mf=$mod
		module_of "$root" "$to"
		echo "$mf $mod"
	done <"$tmp/edges" >"$tmp/medges"
	while IFS= read -r c; do
		echo "module circle in shm/: $c (a module is a file, its header and its _priv.h)"
		bad=1
	done < <(circles <"$tmp/medges")
	local table
	while IFS= read -r f; do
		if [ -z "${layer[$f]:-}" ]; then
			table=layers
			[ "${f%%/*}" = daemon ] && table=dlayers
			echo "$f has no layer: give it one in the table $table= of tests/sh_include_dag.sh (and ARCHITECTURE.md's)"
			bad=1
		fi
	done < <(cd "$root" && find shm daemon -name '*.[ch]' 2>/dev/null | sort)
	# 5. sources are listed
	while IFS= read -r f; do
		if ! grep -qswF "${f##*/}" "$root/CMakeLists.txt" "$root/${f%%/*}/CMakeLists.txt"; then
			echo "$f is in no CMakeLists.txt"
			bad=1
		fi
	done < <(cd "$root" && find shm client daemon -name '*.c' 2>/dev/null | sort)
	return $bad
}

# 7. root objdir stated: the circles of calls between the modules of the
# daemon's objects (objdir/*.dir/NAME.c.o) are the stated ones
calls_check() {
	local root=$1 objs=$2 stated=$3 o f bad=0 c
	for o in "$objs"/*.dir/*.c.o; do
		f=${o##*/}
		f=daemon/${f%.o}
		[ -f "$root/$f" ] || continue # a stale object of a file gone
		module_of "$root" "$f"
		nm "$o" | awk -v m="$mod" '
			NF == 3 && $2 ~ /^[TDBRW]$/ { print "D", m, $3 }
			$1 == "U" { print "U", m, $2 }'
	done >"$tmp/syms"
	awk '
		$1 == "D" { def[$3] = $2; next }
		{ use[NR] = $2 " " $3 }
		END {
			for (i in use) {
				split(use[i], a, " ")
				if ((a[2] in def) && def[a[2]] != a[1])
					print a[1], def[a[2]]
			}
		}' "$tmp/syms" | sort -u | circles >"$tmp/calls.now"
	grep . <<<"$stated" | sort >"$tmp/calls.stated" || true
	while IFS= read -r c; do
		echo "a circle of calls no one stated: $c (cut it, or state it in ARCHITECTURE.md's \"Circles of calls that remain\" and dcircles= here)"
		bad=1
	done < <(comm -13 "$tmp/calls.stated" "$tmp/calls.now")
	while IFS= read -r c; do
		echo "a stated circle of calls the code no longer has: $c (remove it from ARCHITECTURE.md and dcircles= here)"
		bad=1
	done < <(comm -23 "$tmp/calls.stated" "$tmp/calls.now")
	return $bad
}

# A small tree that passes; each case below breaks one rule of it.
mini() { # dir
	mkdir -p "$1/shm" "$1/client" "$1/daemon"
	printf '#include <stdint.h>\n' >"$1/shm/common.h"
	printf '#include "common.h"\n' >"$1/shm/parse.h"
	printf '#include "parse.h"\n' >"$1/shm/parse.c"
	printf '#include "common.h"\n' >"$1/shm/decision.h"
	printf '#include "decision.h"\n' >"$1/shm/breaker.h"
	printf '#include "breaker.h"\n#include "parse.h"\n' >"$1/shm/breaker.c"
	printf '#include "common.h"\n' >"$1/shm/conf.h"
	printf '#include "conf.h"\n#include "breaker.h"\n' >"$1/shm/conf.c"
	printf '#include "breaker.h"\n#include "resil.h"\n#include "ctl.h"\n#include "loop.h"\n' \
		>"$1/daemon/ctl.c"
	printf '\n' >"$1/daemon/log.h"
	printf '#include "log.h"\n' >"$1/daemon/log.c"
	printf '\n' >"$1/daemon/loop.h"
	printf '#include "log.h"\n' >"$1/daemon/ctl.h"
	printf '#include "ctl.h"\n#include "loop.h"\n' >"$1/daemon/loop.c"
	printf '#include "decision.h"\n' >"$1/client/internal.h"
	printf '\n' >"$1/client/resil.h"
	printf 'x parse.c breaker.c conf.c\n' >"$1/CMakeLists.txt"
	printf 'x ctl.c log.c loop.c\n' >"$1/daemon/CMakeLists.txt"
}

fails_with() { # what dir
	local out
	if out=$(check "$2"); then
		echo "FAIL: the check passed a tree with $1"
		exit 1
	fi
	if ! grep -q "$1" <<<"$out"; then
		echo "FAIL: the check did not name '$1':"
		echo "$out"
		exit 1
	fi
	echo "ok: refuses $1"
}

mini "$tmp/good"
if ! out=$(check "$tmp/good"); then
	echo "FAIL: the check refused a good tree:"
	echo "$out"
	exit 1
fi
mini "$tmp/cycle"
printf '#include "breaker.h"\n' >>"$tmp/cycle/shm/decision.h"
fails_with "include cycle" "$tmp/cycle"
mini "$tmp/up"
printf '#include "conf.h"\n' >>"$tmp/up/shm/breaker.c"
fails_with "an arrow up" "$tmp/up"
mini "$tmp/dup"
printf '#include "ctl.h"\n' >>"$tmp/dup/daemon/log.c"
fails_with "daemon/log.c (layer 0) includes daemon/ctl.h (layer 3): an arrow up" "$tmp/dup"
mini "$tmp/dnew"
printf '#include "log.h"\n' >"$tmp/dnew/daemon/newcomer.c"
printf 'x ctl.c log.c loop.c newcomer.c\n' >"$tmp/dnew/daemon/CMakeLists.txt"
fails_with "daemon/newcomer.c has no layer: give it one in the table dlayers=" "$tmp/dnew"
mini "$tmp/snew"
printf '#include "common.h"\n' >"$tmp/snew/shm/newcomer.h"
fails_with "shm/newcomer.h has no layer: give it one in the table layers=" "$tmp/snew"
# a contract's file above a component that includes the contract: no
# file cycle, no arrow up, a circle of modules
mini "$tmp/mcycle"
printf '#include "common.h"\n' >"$tmp/mcycle/shm/seg.h"
printf '#include "seg.h"\n#include "breaker.h"\n' >"$tmp/mcycle/shm/seg_records.c"
printf '#include "seg.h"\n' >>"$tmp/mcycle/shm/breaker.c"
printf 'x parse.c breaker.c conf.c seg_records.c\n' >"$tmp/mcycle/CMakeLists.txt"
fails_with "module circle in shm/: shm/breaker shm/seg" "$tmp/mcycle"
mini "$tmp/folder"
printf '#include "internal.h"\n' >>"$tmp/folder/daemon/ctl.c"
fails_with "daemon/ may not include" "$tmp/folder"
mini "$tmp/glob"
: >"$tmp/glob/daemon/CMakeLists.txt"
fails_with "in no CMakeLists.txt" "$tmp/glob"

# two objects calling each other: unstated, then stated
mini "$tmp/calls"
mkdir -p "$tmp/calls/o/x.dir"
printf 'void b(void);\nvoid a(void) { b(); }\n' >"$tmp/calls/daemon/ctl.c"
printf 'void a(void);\nvoid b(void) { a(); }\n' >"$tmp/calls/daemon/log.c"
printf 'void c(void) {}\n' >"$tmp/calls/daemon/loop.c"
for f in ctl log loop; do
	cc -c -o "$tmp/calls/o/x.dir/$f.c.o" "$tmp/calls/daemon/$f.c"
done
if out=$(calls_check "$tmp/calls" "$tmp/calls/o" ""); then
	echo "FAIL: the check passed a circle of calls no one stated"
	exit 1
fi
grep -q "a circle of calls no one stated: daemon/ctl daemon/log" <<<"$out" || {
	echo "FAIL: the check did not name the circle of calls: $out"
	exit 1
}
echo "ok: refuses a circle of calls no one stated"
if ! out=$(calls_check "$tmp/calls" "$tmp/calls/o" "daemon/ctl daemon/log"); then
	echo "FAIL: the check refused a stated circle of calls: $out"
	exit 1
fi
if calls_check "$tmp/calls" "$tmp/calls/o" "daemon/ctl daemon/log
daemon/log daemon/loop" >/dev/null; then
	echo "FAIL: the check kept a stated circle the code does not have"
	exit 1
fi
echo "ok: refuses a stated circle of calls the code does not have"

if ! out=$(check "$src"); then
	echo "FAIL: the tree breaks the include rules:"
	echo "$out"
	exit 1
fi
echo "ok: $(wc -l <"$tmp/edges") include arrows of shm/, client/, daemon/ follow the rules"
objs=${BIN:-$src/build}/daemon/CMakeFiles
for f in "$src"/daemon/*.c; do
	f=${f##*/}
	if ! ls "$objs"/*.dir/"$f".o >/dev/null 2>&1; then
		echo "not checked: the daemon's calls (no $f.o under $objs)"
		exit 0
	fi
done
if ! out=$(calls_check "$src" "$objs" "$dcircles"); then
	echo "FAIL: the daemon's calls between modules:"
	echo "$out"
	exit 1
fi
echo "ok: the daemon's circles of calls are the $(grep -c . <<<"$dcircles") ARCHITECTURE.md states"
