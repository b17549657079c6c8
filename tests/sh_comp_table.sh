#!/usr/bin/env bash
# label: unit build
# A component outside the product's list is its own files and one row of
# the component table (ARCHITECTURE.md, "Components"). The test-only
# counter (shm/counter.c, counter.h) is named in shm/ by its own two files
# and by its row in comp.c only (the declaration and the entry of
# resil_comps[], inside #ifdef RESIL_TEST_COUNTER); no other file of shm/
# names it or its build, and policy.c calls decision hooks under the
# generic RESIL_COMP_HOOKS only. The script checks its own teeth first: a
# tree where policy.c names the counter's build, and one where conf_types.h
# names its configuration word, must fail.
set -euo pipefail
src=${SRC:-$(cd "$(dirname "$0")/.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# what names the counter: its header, its symbols, its id, its build, its key
names='counter\.h|resil_counter|RESIL_C_COUNTER|RESIL_TEST_COUNTER|COUNTER_ON|"counter = '

check() { # shm-dir: prints each broken rule, fails if any
	local dir=$1 bad=0 f
	for f in "$dir"/*.[ch]; do
		case ${f##*/} in
		counter.c | counter.h) continue ;;
		comp.c)
			# every line naming it lies in an #ifdef RESIL_TEST_COUNTER block
			if awk -v re="$names" '
				/^#ifdef RESIL_TEST_COUNTER/ { inside = 1; next }
				/^#endif/ { inside = 0; next }
				$0 ~ re && !inside { print FILENAME ":" FNR ": " $0; bad = 1 }
				END { exit bad }' "$f"; then
				continue
			fi
			bad=1
			continue
			;;
		esac
		if grep -nE "$names" "$f" | sed "s|^|${f##*/}:|"; then
			bad=1
		fi
	done
	# the row: its declaration and its entry, nothing more
	n=$(grep -cE "$names" "$dir/comp.c" || true)
	if [ "$n" != 4 ]; then
		echo "comp.c: $n lines name the counter (expected 4: two #ifdef, the declaration, the entry)"
		bad=1
	fi
	if grep -nE 'RESIL_TEST_' "$dir/policy.c"; then
		bad=1
	fi
	if ! grep -q '^#ifdef RESIL_COMP_HOOKS' "$dir/policy.c"; then
		echo "policy.c: no RESIL_COMP_HOOKS wrappers"
		bad=1
	fi
	return $bad
}

# teeth
cp -r "$src/shm" "$tmp/a"
sed -i '0,/^#ifdef RESIL_COMP_HOOKS/s//#if defined(RESIL_COMP_HOOKS) || defined(RESIL_TEST_COUNTER)/' \
	"$tmp/a/policy.c"
if check "$tmp/a" >/dev/null; then
	echo "sh_comp_table: a policy.c naming RESIL_TEST_COUNTER passed the check" >&2
	exit 1
fi
cp -r "$src/shm" "$tmp/b"
echo '#define COUNTER_ON(c) ((c)->reserved[0])' >>"$tmp/b/conf_types.h"
if check "$tmp/b" >/dev/null; then
	echo "sh_comp_table: a conf_types.h naming the counter's word passed the check" >&2
	exit 1
fi

if ! out=$(check "$src/shm"); then
	echo "sh_comp_table: the counter component reaches outside its files and its row:" >&2
	echo "$out" >&2
	exit 1
fi
echo "sh_comp_table: ok"
