#!/bin/sh
# vacate-hook recipe for Redis with Sentinel (docs/recipes/redis-sentinel.md).
#
#   redis-sentinel.sh check     evacuate, 1st: refuse (no pause) unless a failover can lose nothing
#   redis-sentinel.sh failover  evacuate, 2nd: pause writes, let replicas catch up, SENTINEL FAILOVER,
#                               become a replica of the new primary, resume
#   redis-sentinel.sh status    Completed once the sentinels agree the primary is elsewhere
#   redis-sentinel.sh cancel    resume writes paused by an interrupted failover (never fails back)
#
# A replica's member has nothing to do: every step exits 0 at once. Every step is safe to run
# again after partial success or after being killed: it starts from what Redis and the
# sentinels say now. POSIX sh; needs only redis-cli, timeout, sed, grep and tr.
#
# Environment:
#   REDIS_HOST        how the sentinels name this member (default: $POD_IP); also used to reach it
#   REDIS_PORT        default 6379
#   SENTINELS         the sentinels, "host:port host:port ..." (all of them, not a Service)
#   SENTINEL_MASTER   the sentinels' name for the primary (default mymaster)
#   REDISCLI_AUTH     the password of Redis and of the sentinels, if any (read by redis-cli)
#   REDIS_PAUSE_MS    how long writes may stay paused if this script dies mid-way (default 30000)
#   REDIS_CATCHUP_SECONDS  how long replicas may take to catch up while writes are paused (default 5)
#   REDIS_SWITCH_SECONDS   how long the sentinels may take to promote a replica (default 30)
set -u

HOST=${REDIS_HOST:-${POD_IP:-}}
PORT=${REDIS_PORT:-6379}
NAME=${SENTINEL_MASTER:-mymaster}
SENTINELS=${SENTINELS:-}
PAUSE_MS=${REDIS_PAUSE_MS:-30000}
CATCHUP=${REDIS_CATCHUP_SECONDS:-5}
SWITCH=${REDIS_SWITCH_SECONDS:-30}
SELF=$HOST:$PORT

say() { printf '%s\n' "$*"; }
fail() { say "$*"; exit 1; }

# cli HOST PORT ARGS...: one command; its reply on stdout, \r removed; non-zero on an error
# reply or no connection (redis-cli has no connect timeout of its own).
cli() {
	_h=$1 _p=$2
	shift 2
	_out=$(timeout 3 redis-cli --no-auth-warning -e -h "$_h" -p "$_p" "$@" 2>&1)
	_rc=$?
	printf '%s\n' "$_out" | tr -d '\r'
	return $_rc
}
me() { cli "$HOST" "$PORT" "$@"; }
field() { printf '%s\n' "$1" | sed -n "s/^$2:\(.*\)\$/\1/p"; }

# role: set ROLE to this member's role (master or slave), or fail.
role() {
	_i=$(me INFO replication) || fail "cannot reach Redis at $SELF: $_i"
	ROLE=$(field "$_i" role)
}

# why OUTPUT: a short reason for a reply that is not an answer (redis-cli's error, or nothing
# when timeout killed it).
why() {
	case $1 in
	'') say "no answer in 3s" ;;
	*"Connection refused"*) say "refused" ;;
	*NOAUTH* | *WRONGPASS* | *"invalid password"* | *"invalid username"*) say "wrong password" ;;
	*) printf '%s\n' "$1" | sed -n '1s/^\(.\{0,40\}\).*/\1/p' ;;
	esac
}

# sentinels: ask every sentinel for the primary. Sets ANSWERED, TOTAL, PRIMARIES (the distinct
# addresses named), OTHER (one of them that is not this member), FAILING (set when a sentinel
# runs a failover), FIRST (the first sentinel that answered, host port) and SILENT (those that
# did not, each with why).
sentinels() {
	ANSWERED=0 TOTAL=0 PRIMARIES= OTHER= FAILING= FIRST= SILENT=
	for _s in $SENTINELS; do
		TOTAL=$((TOTAL + 1))
		_sh=${_s%:*} _sp=${_s##*:}
		_a=$(cli "$_sh" "$_sp" SENTINEL get-master-addr-by-name "$NAME") || {
			SILENT="${SILENT:+$SILENT, }$_s ($(why "$_a"))"
			continue
		}
		_a=$(printf '%s\n' "$_a" | sed -n '1h;2{H;x;s/\n/:/p;}')
		[ -n "$_a" ] || {
			SILENT="${SILENT:+$SILENT, }$_s (does not monitor $NAME)"
			continue
		}
		_m=$(cli "$_sh" "$_sp" SENTINEL master "$NAME") || {
			SILENT="${SILENT:+$SILENT, }$_s ($(why "$_m"))"
			continue
		}
		case $(printf '%s\n' "$_m" | sed -n '/^flags$/{n;p;q;}') in
		*failover_in_progress*) FAILING=$_s ;;
		esac
		ANSWERED=$((ANSWERED + 1))
		[ -n "$FIRST" ] || FIRST="$_sh $_sp"
		case " $PRIMARIES " in *" $_a "*) ;; *) PRIMARIES="${PRIMARIES:+$PRIMARIES }$_a" ;; esac
		[ "$_a" = "$SELF" ] || OTHER=$_a
	done
	[ "$TOTAL" -gt 0 ] || fail "SENTINELS is empty: list the sentinels as host:port"
}
majority() { [ $((ANSWERED * 2)) -gt "$TOTAL" ]; }
# quorum: fail unless a majority of the sentinels answered, naming those that did not.
quorum() {
	majority || fail "only $ANSWERED of $TOTAL sentinels answered; $SILENT did not: a failover needs a majority"
}

# candidates SENTINEL_REPLICAS: every replica in the first sentinel's SENTINEL REPLICAS reply,
# one a line: "+ host:port" for those it could promote, "- host:port is why" for the others
# (down, disconnected, priority 0).
candidates() {
	printf '%s\n' "$1" | {
		_ip= _port= _flags= _prio=
		while IFS= read -r _k && IFS= read -r _v; do
			case $_k in
			name)
				emit
				_ip= _port= _flags= _prio=
				;;
			ip) _ip=$_v ;;
			port) _port=$_v ;;
			flags) _flags=$_v ;;
			slave-priority | replica-priority) _prio=$_v ;;
			esac
		done
		emit
	}
}
emit() {
	[ -n "$_ip" ] || return 0
	case ",$_flags," in
	*,o_down,*) say "- $_ip:$_port is down for a quorum of sentinels (o_down)" ;;
	*,s_down,*) say "- $_ip:$_port is down (s_down)" ;;
	*,disconnected,*) say "- $_ip:$_port is unreachable (disconnected)" ;;
	*) if [ "$_prio" = 0 ]; then say "- $_ip:$_port has replica-priority 0"; else say "+ $_ip:$_port"; fi ;;
	esac
}

# replica INFO HOST:PORT: the "state offset" the primary reports for that replica, if connected.
replica() {
	printf '%s\n' "$1" | grep -F ":ip=${2%:*},port=${2##*:}," |
		sed -n 's/.*state=\([^,]*\).*offset=\([0-9]*\).*/\1 \2/p'
}

# ready: every replica a sentinel could promote is online, or fail saying which is not; with
# none, fail saying why each replica cannot be promoted.
ready() {
	# shellcheck disable=SC2086
	_all=$(cli $FIRST SENTINEL replicas "$NAME") || fail "sentinel ${FIRST% *} does not list the replicas: $_all"
	_all=$(candidates "$_all")
	_c= _no=
	while IFS= read -r _l; do
		case $_l in
		"+ "*) _c="${_c:+$_c
}${_l#+ }" ;;
		"- "*) _no="${_no:+$_no, }${_l#- }" ;;
		esac
	done <<EOF
$_all
EOF
	[ -n "$_c" ] || fail "no replica can take over from $SELF: ${_no:-the sentinels know no replica of $NAME}"
	_i=$(me INFO replication) || fail "cannot reach Redis at $SELF: $_i"
	for _r in $_c; do
		_st=$(replica "$_i" "$_r")
		case $_st in
		online*) ;;
		"") fail "failover of $SELF refused: replica $_r is not connected to it (the sentinels still count it)" ;;
		*) fail "failover of $SELF refused: replica $_r is still syncing (state ${_st% *})" ;;
		esac
	done
	CANDIDATES=$_c
}

# demote ADDR: become a replica of ADDR once it is a primary, then resume writes (paused
# writers get READONLY and find the new primary through the sentinels).
demote() {
	_r=$(cli "${1%:*}" "${1##*:}" INFO replication) || fail "new primary $1 does not answer: $_r"
	[ "$(field "$_r" role)" = master ] || fail "$1, named primary by the sentinels, is not a primary yet"
	me REPLICAOF "${1%:*}" "${1##*:}" >/dev/null || fail "REPLICAOF $1 failed on $SELF"
	me CLIENT UNPAUSE >/dev/null
	say "primary moved from $SELF to $1; $SELF is its replica"
}

check() {
	role
	[ "$ROLE" = master ] || {
		say "$SELF is a replica: nothing to move"
		exit 0
	}
	sentinels
	quorum
	if [ -n "$OTHER" ] || [ -n "$FAILING" ]; then
		say "a failover of $SELF has started"
		exit 0
	fi
	ready
	say "failover of $SELF possible: replicas $(printf '%s' "$CANDIDATES" | tr '\n' ' ') online"
}

# wait_switch: keep writes paused until the sentinels name another primary, then demote.
wait_switch() {
	_end=$(($(date +%s) + SWITCH))
	while :; do
		me CLIENT PAUSE "$PAUSE_MS" WRITE >/dev/null
		sentinels
		if [ -n "$OTHER" ]; then
			demote "$OTHER"
			return
		fi
		[ "$(date +%s)" -lt "$_end" ] ||
			fail "failover of $SELF started but not finished after ${SWITCH}s; writes stay paused at most ${PAUSE_MS}ms"
		sleep 0.1
	done
}

failover() {
	role
	if [ "$ROLE" != master ]; then
		me CLIENT UNPAUSE >/dev/null
		say "$SELF is a replica: nothing to move"
		exit 0
	fi
	sentinels
	quorum
	if [ -n "$OTHER" ] || [ -n "$FAILING" ]; then
		wait_switch
		return
	fi
	ready
	me CLIENT PAUSE "$PAUSE_MS" WRITE >/dev/null || fail "CLIENT PAUSE failed on $SELF"
	say "writes paused on $SELF; waiting for replicas $(printf '%s' "$CANDIDATES" | tr '\n' ' ') to catch up"
	_end=$(($(date +%s) + CATCHUP))
	while :; do
		_i=$(me INFO replication) || fail "cannot reach Redis at $SELF: $_i"
		_off=$(field "$_i" master_repl_offset)
		_behind=
		for _r in $CANDIDATES; do
			_st=$(replica "$_i" "$_r")
			case $_st in
			"online $_off") ;;
			online*) _behind="$_r is $((_off - ${_st#* })) bytes behind (at ${_st#* } of $_off)" ;;
			*) _behind="$_r is ${_st:-disconnected}" ;;
			esac
		done
		[ -n "$_behind" ] || break
		if [ "$(date +%s)" -ge "$_end" ]; then
			me CLIENT UNPAUSE >/dev/null
			fail "failover of $SELF refused: replica $_behind after ${CATCHUP}s of paused writes; writes resumed"
		fi
		sleep 0.05
	done
	# shellcheck disable=SC2086
	_f=$(cli $FIRST SENTINEL failover "$NAME") || {
		me CLIENT UNPAUSE >/dev/null
		case $_f in
		*NOGOODSLAVE*) _f="it finds no replica it may promote (NOGOODSLAVE: each is down, disconnected, priority 0 or was cut off from the primary too long)" ;;
		*INPROG*) _f="a failover already runs (INPROG)" ;;
		esac
		fail "failover of $SELF refused by sentinel ${FIRST% *}: $_f; writes resumed"
	}
	say "replicas caught up at offset $_off; sentinel ${FIRST% *} promotes one"
	wait_switch
}

status() {
	if ! _i=$(me INFO replication); then
		printf 'InProgress\ncannot reach Redis at %s: %s\n' "$SELF" "$_i"
		return
	fi
	_role=$(field "$_i" role)
	sentinels
	if ! majority; then
		printf 'InProgress\nonly %s of %s sentinels answered; %s did not\n' "$ANSWERED" "$TOTAL" "$SILENT"
	elif [ "$PRIMARIES" != "$OTHER" ]; then
		printf 'InProgress\nthe sentinels name %s as primary\n' "$PRIMARIES"
	elif [ -n "$FAILING" ]; then
		printf 'InProgress\nsentinel %s is still running a failover\n' "$FAILING"
	elif [ "$_role" = master ]; then
		printf 'InProgress\n%s still acts as a primary; the sentinels name %s\n' "$SELF" "$OTHER"
	else
		printf 'Completed\nprimary is %s (%s of %s sentinels agree); %s is a replica\n' "$OTHER" "$ANSWERED" "$TOTAL" "$SELF"
	fi
}

cancel() {
	role
	if [ "$ROLE" != master ]; then
		me CLIENT UNPAUSE >/dev/null
		say "$SELF is a replica; writes not paused (a failover is not undone)"
		exit 0
	fi
	sentinels
	quorum
	if [ -n "$OTHER" ]; then
		demote "$OTHER"
		return
	fi
	[ -z "$FAILING" ] || fail "sentinel $FAILING is running a failover of $SELF; writes stay paused until it ends"
	me CLIENT UNPAUSE >/dev/null || fail "CLIENT UNPAUSE failed on $SELF"
	say "writes resumed on $SELF, still the primary"
}

[ -n "$HOST" ] || fail "set REDIS_HOST or POD_IP"
case ${1:-} in
check | failover | status | cancel) "$1" ;;
*) fail "usage: $0 check|failover|status|cancel" ;;
esac
