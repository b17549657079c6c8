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
#   4. every .c of shm/, client/ and daemon/ is named in a CMakeLists.txt
#      (sources are listed, never globbed).
# A file new to shm/ must be given a layer here. The script checks its own
# teeth first: trees with a cycle, a layer inverted and a forbidden folder
# arrow must fail.
set -euo pipefail
src=${SRC:-$(cd "$(dirname "$0")/.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# layer  files of shm/
layers='
0 common.h common.c clock.c pcpu.h parse.h parse.c conf_types.h names.h names.c
1 seg.h policy.h comp.h
2 stats.h stats.c breaker.h breaker.c breaker_conf.c limit.h limit.c limit_priv.h limit_keyed.c
2 limit_global.h limit_global.c
2 bulkhead.h bulkhead.c adaptive.h adaptive.c shed.h shed.c
2 budget.h retry.c budget.c counter.h counter.c
3 comp.c conf.h conf.c policy.c seg.c metrics.h metrics.c
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
		layer[$f]=$n
	done
done <<<"$layers"

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
		# 3. layers inside shm
		if [ "$from_dir" = shm ] && [ "$to_dir" = shm ]; then
			local lf lt
			lf=${layer[${f#shm/}]:-}
			lt=${layer[${to#shm/}]:-}
			if [ -z "$lf" ] || [ -z "$lt" ]; then
				echo "$f or $to has no layer in tests/sh_include_dag.sh: give it one"
				bad=1
			elif [ "$lt" -gt "$lf" ]; then
				echo "$f (layer $lf) includes $to (layer $lt): an arrow up"
				bad=1
			fi
		fi
	done <"$tmp/edges"
	# 4. sources are listed
	while IFS= read -r f; do
		if ! grep -qswF "${f##*/}" "$root/CMakeLists.txt" "$root/${f%%/*}/CMakeLists.txt"; then
			echo "$f is in no CMakeLists.txt"
			bad=1
		fi
	done < <(cd "$root" && find shm client daemon -name '*.c' 2>/dev/null | sort)
	return $bad
}

# A small tree that passes; each case below breaks one rule of it.
mini() { # dir
	mkdir -p "$1/shm" "$1/client" "$1/daemon"
	printf '#include <stdint.h>\n' >"$1/shm/common.h"
	printf '#include "common.h"\n' >"$1/shm/parse.h"
	printf '#include "parse.h"\n' >"$1/shm/parse.c"
	printf '#include "common.h"\n' >"$1/shm/policy.h"
	printf '#include "policy.h"\n' >"$1/shm/breaker.h"
	printf '#include "breaker.h"\n#include "parse.h"\n' >"$1/shm/breaker.c"
	printf '#include "common.h"\n' >"$1/shm/conf.h"
	printf '#include "conf.h"\n#include "breaker.h"\n' >"$1/shm/conf.c"
	printf '#include "breaker.h"\n#include "resil.h"\n' >"$1/daemon/ctl.c"
	printf '#include "policy.h"\n' >"$1/client/internal.h"
	printf '\n' >"$1/client/resil.h"
	printf 'x parse.c breaker.c conf.c\n' >"$1/CMakeLists.txt"
	printf 'x ctl.c\n' >"$1/daemon/CMakeLists.txt"
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
printf '#include "breaker.h"\n' >>"$tmp/cycle/shm/policy.h"
fails_with "include cycle" "$tmp/cycle"
mini "$tmp/up"
printf '#include "conf.h"\n' >>"$tmp/up/shm/breaker.c"
fails_with "an arrow up" "$tmp/up"
mini "$tmp/folder"
printf '#include "internal.h"\n' >>"$tmp/folder/daemon/ctl.c"
fails_with "daemon/ may not include" "$tmp/folder"
mini "$tmp/glob"
: >"$tmp/glob/daemon/CMakeLists.txt"
fails_with "in no CMakeLists.txt" "$tmp/glob"

if ! out=$(check "$src"); then
	echo "FAIL: the tree breaks the include rules:"
	echo "$out"
	exit 1
fi
echo "ok: $(wc -l <"$tmp/edges") include arrows of shm/, client/, daemon/ follow the rules"
