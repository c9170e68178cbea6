"""A reclaim plan as a POSIX shell script to review: dry run by default, ``--apply`` to act.

In the manner of rmlint's generated script, written afresh: every step re-checks the file's identity
(device, inode, size, mtime, with ``stat -c`` on GNU systems and ``stat -f`` on the BSDs and macOS,
chosen when the script runs; for a log its engine keeps writing or a deleted file held open, device,
inode and owner) and skips
it, saying why, if anything changed, or if the file or the directory holding it is marked immutable or
append-only now (``lsattr -d`` on Linux, ``ls -ldO``/``ls -ldo`` on macOS and the BSDs: a file so marked is never
removed, and ``rm`` would only fail on it); no step follows a symlink
(the file and every directory above it are tested with ``test -L``); a duplicate goes only while its
kept copy passes the same checks and ``cmp`` finds their bytes equal; every name is quoted so that no
byte of it is ever read as shell syntax. The script is ASCII whatever the names hold: a name that is
printable ASCII is single-quoted (``'`` as ``'\\''``), any other is rebuilt at run time by ``printf``
from octal escapes (newlines, control bytes, bytes that are not UTF-8), so it travels as text. What it
prints names each file escaped as ``ls -b`` does (``engine.paths.escaped``), so a name holding a newline or
a terminal escape cannot forge a line of the review; the commands get the exact bytes. At the end it
prints the bytes actually freed, from ``df`` before and after on each filesystem it touched.

No step waits forever on a name an attacker swapped a FIFO in for after its last look (``cmp`` and the
truncation open it, and an open of a FIFO waits for its other end): both run in the background, stopped
after a while (``bounded``), and the file is then skipped.

What the script cannot do that ``reclaim`` does: act relative to an open directory, or pin a file before
it opens it. Its checks and its ``rm``, ``cmp``, ``lsattr`` or ``: >`` each resolve the path again, so a
directory swapped for a symlink between the two would lead them elsewhere with the rights of whoever runs
the script. So it acts only where no other user can reach elsewhere that way (``steady``): a directory
belongs to root or to the user running the script and no one else may write it (or it is sticky, and the
entry below it is root's or that user's too). Which directories must be so depends on the step. ``rm``
never follows the name it removes, and another user who may write the file's own directory (root:syslog
0775 /var/log, sticky /tmp) can swap in under that name only a name whose removal harms no one: a file they
could remove themselves, a symlink (the link goes, not what it names), a hard link to another's file
(where protected_hardlinks is off: one name goes, the file and its other names stay). So for a removal
only the directories above the file's own must be steady; where its own is not, ``lsattr`` (which opens
what it looks at) is not run on the file, and one marked immutable fails ``rm`` instead (``ls -ldO`` on
the BSDs opens nothing). ``: >`` and ``cmp`` open the name and
follow a symlink at its end (to a device whose open acts, a watchdog's; to root's file, whose bytes
``cmp`` would tell equal or not), so emptying and comparing a duplicate need the file's own directory
steady too. Any step refused is skipped, naming the directory, with the advice to run that step as its
owner or use ``reclaim``. What a directory passed is kept for the rest of the script (by its number), as no
other user can undo it, but for an entry of a sticky directory on its way: that is its owner's only while
it is there, and anyone may take a name its owner moved away, so that entry's owner, device and inode are
compared again at each step. A deleted file held open is emptied through
``/proc/PID/fd/N``, which its holder may point at any file it can name (an ``O_PATH`` descriptor needs no
read permission) between the look and the open: the script empties it only when the holder is root or
the user running the script (every user id in ``/proc/PID/status``; ``/proc/PID`` itself is root's
when the process is not dumpable), and only while that descriptor leads to the planned device, inode,
owner and former name (a freed inode number is handed straight back).
"""

from __future__ import annotations

import os
import time

from sysmcp.engine.paths import escaped
from sysmcp.reclaim._plan import Item, Plan, PlannedFile, held_names

HEADER = r"""#!/bin/sh
# sysmcp reclaim plan {plan_id}, made {made}: {items}, {planned} bytes planned.
# Review it, then run:  sh THIS-FILE           (dry run: prints what it would do)
#                       sh THIS-FILE --apply   (acts; each file is re-checked first)
set -u
APPLY=0
case "${{1-}}" in
  --apply) APPLY=1 ;;
  '') ;;
  *) printf 'usage: sh %s [--apply]\n' "$0" >&2; exit 2 ;;
esac
if stat -c %i / >/dev/null 2>&1; then STATS=gnu; else STATS=bsd; fi
DONE=0
SKIPPED=0
ME=$(id -u)
FRESH=' '
ident() {{
  if [ "$STATS" = gnu ]; then stat -c '%d:%i:%s:%Y' -- "$1"; else stat -f '%d:%i:%z:%m' -- "$1"; fi
}}
ident_l() {{
  # device, inode and owner of what $1 leads to (a descriptor's file, through /proc/PID/fd/N)
  if [ "$STATS" = gnu ]; then stat -L -c '%d:%i:%u' -- "$1"; else stat -L -f '%d:%i:%u' -- "$1"; fi
}}
nolink() {{
  p=$1
  while [ -n "$p" ]; do
    if [ -L "$p" ]; then return 1; fi
    p=${{p%/*}}
  done
  return 0
}}
skip() {{
  printf 'skipped: %s: %s\n' "$1" "$2"
  SKIPPED=$((SKIPPED + 1))
}}
marked() {{
  # "immutable" or "append-only" when $1 (a file, or a directory itself) is marked so: lsattr's i or a
  # (chattr +i, +a) on Linux; the flags ls -lO (macOS) or ls -lo (the BSDs) shows, uchg/schg or
  # uappnd/sappnd (chflags), elsewhere
  if [ "$STATS" = gnu ]; then
    command -v lsattr >/dev/null 2>&1 || return 1
    f=$(lsattr -d -- "$1" 2>/dev/null) || return 1
    f=${{f%% *}}
  else
    f=$(ls -ldO -- "$1" 2>/dev/null || ls -ldo -- "$1" 2>/dev/null) || return 1
    case " $f " in
      *[\ ,]uchg[\ ,]*|*[\ ,]schg[\ ,]*) f=i ;;
      *[\ ,]uappnd[\ ,]*|*[\ ,]sappnd[\ ,]*) f=a ;;
      *) f=- ;;
    esac
  fi
  case $f in
    *i*) echo immutable ;;
    *a*) echo append-only ;;
    *) return 1 ;;
  esac
}}
unmarked() {{
  # $1 and the directory holding it (number $3) marked neither immutable nor append-only, or skip "$2"
  # saying which is. lsattr opens what it looks at, so $1 itself is looked at only where no other user can
  # put another file in its place (a device whose open acts, a watchdog's); elsewhere a marked file fails
  # rm. The directory is looked at once (again when steady finds another under its name): one marked
  # later fails rm, which is then skipped.
  if [ "$STATS" != gnu ] || steady "$1" "$2" "$3"; then
    if m=$(marked "$1"); then skip "$2" "marked $m (chattr/chflags), so it stays"; return 1; fi
  fi
  d=${{1%/*}}; ds=${{2%/*}}
  eval "m=\${{DM$3-}}"
  if [ -z "$m" ]; then
    m=$(marked "${{d:-/}}") || m=-
    eval "DM$3=\$m"
  fi
  if [ "$m" != - ]; then
    skip "$2" "its directory ${{ds:-/}} is marked $m, so no name in it can be removed: unmark it (chattr -i or -a) and run again, or leave it"
    return 1
  fi
  return 0
}}
perms() {{
  if [ "$STATS" = gnu ]; then stat -c '%u %a' -- "$1"; else stat -f '%u %Mp%Lp' -- "$1"; fi
}}
pinned() {{
  # owner, device and inode of $1 itself (a symlink's own): which entry a name leads to
  if [ "$STATS" = gnu ]; then stat -c '%u:%d:%i' -- "$1"; else stat -f '%u:%d:%i' -- "$1"; fi
}}
steady() {{
  # No user but root and this one can rename or replace a name on the way to $1 while this runs: each
  # directory above it is theirs and writable by no one else, or sticky with the entry below it theirs.
  # With $4 "loose" only the directories above $1's own are looked at: rm never follows a final name,
  # so another user's names in that directory (a group's /var/log, a sticky /tmp) lead it nowhere else.
  # Else it returns 1 with NOTE saying why ("$2": $1 as shown): this script resolves each path again at
  # every step, so a directory swapped for a symlink after its look would lead rm, cmp or : > elsewhere.
  # What passed is kept by $1's directory's number ($3): no other user can undo it (only root or a
  # directory's owner changes its mode, owner or entries where no one else may write), except where a
  # sticky directory is on the way: its entry is its owner's only while it is there, and once its owner
  # moves or removes it anyone may take the name. So DF$3 keeps, for each sticky directory on the way,
  # how far up from $1's directory its entry is and which entry it was (pinned); the first look of each
  # step (FRESH: the numbers compared since the step began) compares them, one stat each, and if one is
  # another now, forgets the directory and looks again. A sticky directory's entry that is $1 itself is
  # looked at for each file: their owners differ.
  sp=${{1%/*}}; ss=${{2%/*}}; own=
  eval "c=\${{DF$3-}}"
  case $FRESH in
    *" $3 "*) ;;
    *) if [ -n "$c" ] && ! pins "$sp" "$c"; then unset "DC$3" "DF$3" "DM$3"; c=; fi ;;
  esac
  if [ "${{4-}}" != loose ]; then
    eval "own=\${{DC$3-}}"
    if [ -z "$own" ]; then
      held "$sp" "$ss" "$1" || return 1
      [ "$sl" = 0 ] && own=1
    fi
  fi
  if [ -z "$c" ]; then
    c=1; k=0
    while [ -n "$sp" ]; do
      below=$sp; sp=${{sp%/*}}; ss=${{ss%/*}}
      held "$sp" "$ss" "$below" || return 1
      [ "$sl" = 0 ] || c="$c $k=$bo"
      k=$((k + 1))
    done
    eval "DF$3=\$c"
  fi
  FRESH="$FRESH$3 "
  [ -z "$own" ] || eval "DC$3=1"
  return 0
}}
pins() {{
  # Each sticky directory's entry kept in $2 ("k=owner:device:inode", k directories up from $1, after a
  # leading 1) is still the entry on the way to $1.
  for e in $2; do
    [ "$e" = 1 ] && continue
    b=$1; k=${{e%%=*}}
    while [ "$k" -gt 0 ]; do b=${{b%/*}}; k=$((k - 1)); done
    [ "$(pinned "$b" 2>/dev/null)" = "${{e#*=}}" ] || return 1
  done
  return 0
}}
held() {{
  # No user but root and this one can rename or replace the name $3 in the directory $1 ("$2" as shown):
  # the directory is theirs and writable by no one else (sl=0), or sticky with $3 theirs (sl=1, and bo
  # is $3 pinned).
  pm=$(perms "${{1:-/}}") || {{ NOTE="cannot look at the directory ${{2:-/}}"; return 1; }}
  po=${{pm%% *}}; pm=${{pm#* }}; sl=0
  if [ "$po" = 0 ] || [ "$po" = "$ME" ]; then
    [ $((0$pm & 022)) = 0 ] && return 0
    if [ $((0$pm & 01000)) != 0 ]; then
      bo=$(pinned "$3") || bo=-
      sl=1
      case $bo in 0:*|"$ME":*) return 0 ;; esac
    fi
  fi
  NOTE="another user may rename or replace names in ${{2:-/}} (its owner $po, mode $pm) and so swap a directory on its way for a symbolic link while this script runs: run this step as that user, or use reclaim, which acts relative to an open directory"
  return 1
}}
avail() {{
  df -Pk -- "$1" 2>/dev/null | awk 'NR == 2 {{ print $4 }}'
}}
rmf() {{
  FRESH=' '
  if ! nolink "$1"; then skip "$3" "a symbolic link is on its path now"; return; fi
  if [ ! -f "$1" ]; then skip "$3" "gone, or no longer a regular file"; return; fi
  now=$(ident "$1") || {{ skip "$3" "cannot be looked at"; return; }}
  if [ "$now" != "$2" ]; then skip "$3" "changed since the plan"; return; fi
  steady "$1" "$3" "$4" loose || {{ skip "$3" "$NOTE"; return; }}
  unmarked "$1" "$3" "$4" || return
  if [ "$APPLY" = 1 ]; then
    if rm -f -- "$1"; then printf 'removed: %s\n' "$3"; DONE=$((DONE + 1)); else skip "$3" "rm failed"; fi
  else
    printf 'would remove: %s\n' "$3"
  fi
}}
dupf() {{
  FRESH=' '
  if ! nolink "$4" || [ ! -f "$4" ]; then skip "$3" "the kept copy is gone, so this may be the last copy"; return; fi
  kept=$(ident "$4") || {{ skip "$3" "the kept copy cannot be looked at"; return; }}
  if [ "$kept" != "$5" ]; then skip "$3" "the kept copy changed since the plan, so this copy stays"; return; fi
  # cmp opens and reads both names, following a symlink at the end: only where no other user can put
  # another file there (a device whose open acts; root's file, whose bytes cmp would tell apart)
  steady "$4" "$6" "$8" || {{ skip "$3" "$NOTE"; return; }}
  if nolink "$1" && [ -f "$1" ]; then
    steady "$1" "$3" "$7" || {{ skip "$3" "$NOTE"; return; }}
    size=${{2#*:*:}}
    bounded $((60 + ${{size%%:*}} / 10000000)) cmp -s -- "$4" "$1"
    case $? in
      0) ;;
      1|2) skip "$3" "its bytes are no longer the kept copy's"; return ;;
      *) skip "$3" "not compared with the kept copy in time (a FIFO or device swapped in?)"; return ;;
    esac
  fi
  rmf "$1" "$2" "$3" "$7"
}}
bounded() {{
  # "$2"... in the background, stopped after $1 seconds: an open of a FIFO swapped in for a planned file
  # after its last look would wait for a writer forever. The watchdog's own sleep goes with it.
  t=$1; shift
  "$@" & c=$!
  (
    trap 'kill "${{s-}}" 2>/dev/null; exit 0' TERM
    sleep "$t" & s=$!
    wait "$s" && kill "$c" 2>/dev/null
  ) >/dev/null 2>&1 &
  w=$!
  wait "$c" 2>/dev/null; r=$?
  kill "$w" 2>/dev/null; wait "$w"
  return "$r"
}}
empty() {{
  : > "$1"
}}
holder() {{
  # the real, effective, saved and filesystem user ids of the process whose /proc/PID/fd/N $1 is
  awk '/^Uid:/ {{ print $2, $3, $4, $5 }}' "${{1%/fd/*}}/status" 2>/dev/null
}}
trunc() {{
  if [ ! -e "$1" ]; then skip "$3" "the holder closed it"; return; fi
  # Its holder decides what that number leads to at every open (an O_PATH descriptor of any file it can
  # name, /etc/shadow too, reopened for writing with this script's rights): only a holder that is root
  # or this user is believed between the look and the truncation.
  uids=$(holder "$1")
  if [ -z "$uids" ]; then skip "$3" "the holder is gone"; return; fi
  for u in $uids; do
    case $u in
      0|"$ME") ;;
      *) skip "$3" "held by another user's process, which could put another file behind that number while this script runs: use reclaim, which pins the file before it opens it"; return ;;
    esac
  done
  now=$(ident_l "$1") || {{ skip "$3" "cannot be looked at"; return; }}
  # $2 is the planned device:inode:owner. The inode number and the name it had: a freed number is
  # handed straight back (ext4), and the holder's next deleted file may have it, on the same descriptor
  if [ "${{now%:*}}" != "${{2%:*}}" ] || [ "$(readlink -- "$1")X" != "$4X" ]; then
    skip "$3" "another file is open there now"; return
  fi
  if [ "$now" != "$2" ]; then skip "$3" "another user's file now (its owner changed since the plan), so it stays"; return; fi
  if [ "$APPLY" = 1 ]; then
    if bounded 10 empty "$1"; then printf 'truncated: %s\n' "$3"; DONE=$((DONE + 1)); else skip "$3" "truncation failed"; fi
  else
    printf 'would truncate: %s\n' "$3"
  fi
}}
"""

#: Emptying a log its engine keeps open (only in a plan that has one): the file must still be the
#: planned inode with the planned owner and one name (a hard link elsewhere would be emptied too), no
#: symlink on its path, and is emptied bounded in time.
LOGF = r"""owned() {
  if [ "$STATS" = gnu ]; then stat -c '%d:%i:%u:%h' -- "$1"; else stat -f '%d:%i:%u:%l' -- "$1"; fi
}
logf() {
  FRESH=' '
  if ! nolink "$1"; then skip "$3" "a symbolic link is on its path now"; return; fi
  if [ ! -f "$1" ]; then skip "$3" "gone, or no longer a regular file"; return; fi
  now=$(owned "$1") || { skip "$3" "cannot be looked at"; return; }
  if [ "$now" != "$2" ]; then skip "$3" "another file, another owner or another name since the plan"; return; fi
  steady "$1" "$3" "$4" || { skip "$3" "$NOTE"; return; }
  if m=$(marked "$1"); then skip "$3" "marked $m (chattr/chflags), so it stays"; return; fi
  if [ "$APPLY" = 1 ]; then
    if bounded 10 empty "$1"; then printf 'truncated: %s\n' "$3"; DONE=$((DONE + 1)); else skip "$3" "truncation failed"; fi
  else
    printf 'would truncate: %s\n' "$3"
  fi
}
"""

FOOTER = r"""
if [ "$APPLY" = 1 ]; then
  FILES=files; [ "$DONE" = 1 ] && FILES=file
  printf 'done: %s %s acted on, %s skipped; %s bytes freed (df before and after)\n' "$DONE" "$FILES" "$SKIPPED" "$FREED"
else
  printf 'dry run: nothing was changed (%s skipped); run with --apply to act\n' "$SKIPPED"
fi
"""


def quote(raw: bytes, var: str = "P") -> tuple[str, str]:
    """Shell text that sets nothing or ``var``, and a word that then expands to exactly ``raw``, in ASCII.

    Printable ASCII goes between single quotes; anything else is rebuilt into ``var`` by ``printf`` from
    octal escapes, with a trailing ``X`` (taken off again) so command substitution keeps final newlines.
    """
    text = raw.decode("ascii", errors="replace")
    if text.isprintable() and text.isascii() and "\ufffd" not in text:
        return "", "'" + text.replace("'", "'\\''") + "'"
    octal = "".join(chr(b) if chr(b).isalnum() and b < 128 else f"\\{b:03o}" for b in raw)
    return f"{var}=$(printf '{octal}X'); {var}=${{{var}%X}}; ", f'"${var}"'


def _step(item: Item, entry: PlannedFile, directories: dict[bytes, int]) -> str:
    """One step: the exact name to act on, its planned identity, the name as the review prints it
    (``escaped``: a name holding newlines or terminal escapes cannot forge a line of the dry run), and
    the number of the directory holding it (``directories``: each numbered once, the script checks it once)."""
    who = entry.identity
    number = directories.setdefault(os.path.dirname(entry.path), len(directories))
    setup, word, show_word = _named(entry.path, "P", "S")
    if item.held:  # the name it had, as /proc/PID/fd/N reads while it has none
        former_setup, former = quote(next(iter(held_names(item)), b"") + b" (deleted)", "F")
        return f"{setup}{former_setup}trunc {word} '{who.dev}:{who.ino}:{who.uid}' {show_word} {former}"
    if item.emptied:  # a log its engine keeps writing: only its inode and owner stay put
        return f"{setup}logf {word} '{who.dev}:{who.ino}:{who.uid}:1' {show_word} {number}"
    planned = f"'{who.dev}:{who.ino}:{who.size}:{who.mtime_ns // 1_000_000_000}'"
    if item.keep is not None:  # a duplicate: only while its kept copy is the planned file, same bytes
        kept = item.keep.identity
        keep_setup, keep_word, keep_show_word = _named(item.keep.path, "K", "J")
        ident = f"'{kept.dev}:{kept.ino}:{kept.size}:{kept.mtime_ns // 1_000_000_000}'"
        keep_number = directories.setdefault(os.path.dirname(item.keep.path), len(directories))
        return (
            f"{setup}{keep_setup}dupf {word} {planned} {show_word} {keep_word} {ident} "
            f"{keep_show_word} {number} {keep_number}"
        )
    return f"{setup}rmf {word} {planned} {show_word} {number}"


def _named(path: bytes, var: str, shown_var: str) -> tuple[str, str, str]:
    """``quote`` of ``path`` (into ``var``) and of the name as the review prints it (into ``shown_var``,
    unless it is the same): the setup of both, the word of each."""
    setup, word = quote(path, var)
    shown = escaped(path).encode()
    show_setup, show_word = ("", word) if shown == path else quote(shown, shown_var)
    return setup + show_setup, word, show_word


def _comment(text: str) -> str:
    return "# " + "".join(c if c.isprintable() and c.isascii() else "?" for c in text)


def render_script(plan: Plan) -> str:
    """The whole script, ASCII only."""
    emptied = any(item.emptied for item in plan.items)
    lines = [
        HEADER.format(
            plan_id=plan.id,
            made=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(plan.created)),
            # An engine words no quantity through render (tests/test_render.py); the script is the
            # one text it writes, and its one count is said here: "1 item", "3 items".
            items=f"{len(plan.items)} item" + ("" if len(plan.items) == 1 else "s"),
            planned=plan.bytes,
        )
        + (LOGF if emptied else "")
    ]
    probes: dict[int, bytes] = {}  # a directory on each filesystem the script acts on, for df
    for item in plan.items:
        if not item.held and item.action != "command":
            for entry in item.entries:
                probes.setdefault(entry.identity.dev, os.path.dirname(entry.path) or b"/")
    quoted = list(enumerate(quote(probe) for probe in probes.values()))
    lines += [f"{setup}B{number}=$(avail {word})" for number, (setup, word) in quoted]
    directories: dict[bytes, int] = {}
    steps: list[str] = []
    for item in plan.items:
        steps += ["", _comment(f"{item.id}: {item.klass}, {item.bytes} bytes, {item.safety}. {item.cost}.")]
        if item.command:
            steps.append(_comment(f"the vendor's own way: {item.command}"))
        if item.note:
            steps.append(_comment(item.note))
        if item.action == "command":
            steps.append(_comment("nothing for this script to do: run the command above yourself"))
            continue
        steps += [_step(item, entry, directories) for entry in item.entries]
    if directories:  # what a directory passed is this script's own look, never a variable it inherited
        lines.append(
            f'i=0; while [ "$i" -lt {len(directories)} ]; do unset "DC$i" "DF$i" "DM$i"; i=$((i + 1)); done'
        )
    lines += [*steps, "", "FREED=0"]
    lines += [
        f"{setup}A=$(avail {word}); FREED=$((FREED + (${{A:-0}} - ${{B{number}:-0}}) * 1024))"
        for number, (setup, word) in quoted
    ]
    lines.append(FOOTER)
    return "\n".join(lines)
