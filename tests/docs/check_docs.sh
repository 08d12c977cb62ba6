#!/usr/bin/env bash
# The README and docs/ hold together: every link to a file resolves (relative to the page), every
# file the text names by its path in backticks exists, and every flag that a `seqgrad` command in a
# code block uses is one its subcommand's --help lists.
#   check_docs.sh SEQGRAD SOURCE_DIR
set -uo pipefail
seqgrad=$1
root=$2
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
cd "$root" || fail "no source tree at $root"

pages=(README.md docs/*.md)
folders="core|nn|models|text|training|inference|cli|tests|bench|fuzz|examples|configs|data|docs|scripts|include"
problems=()
links=0 paths=0 flags=0

for page in "${pages[@]}"; do
  dir=$(dirname "$page")
  # [text](target) and ![alt](target): targets that are not web addresses or anchors.
  while IFS= read -r target; do
    target=${target%%#*}
    [ -n "$target" ] || continue
    links=$((links + 1))
    [ -e "$dir/$target" ] || problems+=("$page: the link to $target leads nowhere")
  done < <(awk '/^```/ { block = !block; next } !block' "$page" | sed -E 's/`[^`]*`//g' \
             | grep -oE '\]\([^)]+\)' | sed -E 's/^\]\(//; s/\)$//' | grep -vE '^(https?:|mailto:|#)')
  # `a/path/to/file.ext` naming a file of the project by its path from the root (or from docs/).
  while IFS= read -r path; do
    paths=$((paths + 1))
    [ -e "$path" ] || [ -e "$dir/$path" ] || problems+=("$page: \`$path\` does not exist")
  done < <(grep -oE "\`($folders)/[A-Za-z0-9_./-]+\.[a-z]+\`" "$page" | tr -d '`' | grep -v '\*' | sort -u)
done

# The subcommands' flags, from their --help.
declare -A known
for command in train eval predict generate average score attention summary curves check demo; do
  known[$command]=$("$seqgrad" "$command" --help 2>&1 | grep -oE -- '--[a-z0-9-]+' | sort -u | tr '\n' ' ')
  [ -n "${known[$command]}" ] || fail "seqgrad $command --help lists no flags"
done
for page in "${pages[@]}"; do
  # Lines of fenced code blocks that run the program: "seqgrad SUB ..." or ".../seqgrad SUB ...",
  # a line ending in a backslash joined to the next.
  while IFS= read -r line; do
    command=$(sed -E 's/^.*seqgrad +([a-z]+).*$/\1/' <<< "$line")
    [ -n "${known[$command]+x}" ] || continue
    own=$(sed -E 's/^.*seqgrad +[a-z]+//' <<< "${line%%#*}")  # the subcommand's own arguments
    for flag in $(grep -oE -- '(^| )--[a-z0-9-]+' <<< "$own" | tr -d ' '); do
      flags=$((flags + 1))
      [[ " ${known[$command]} " == *" $flag "* ]] || problems+=("$page: seqgrad $command has no flag $flag: $line")
    done
  done < <(awk '/^```/ { block = !block; next }
                block { if (sub(/\\$/, "")) { held = held $0; next } print held $0; held = "" }' "$page" \
             | grep -E '(^|[ /])seqgrad +[a-z]+ ')
done

for p in "${problems[@]}"; do echo "$p"; done
[ ${#problems[@]} -eq 0 ] || fail "${#problems[@]} problems in the README and docs/"
[ $links -gt 10 ] && [ $paths -gt 50 ] && [ $flags -gt 50 ] \
  || fail "too little was checked ($links links, $paths paths, $flags flags): is the parsing broken?"
echo "docs: $links links, $paths paths and $flags flags of seqgrad commands, all found"
