#!/bin/sh
# vacate-hook's steps for a PostgreSQL member under Patroni: evacuate or status.
# Talks only to Patroni's REST API (curl, sed, grep: what the database's image has).
#   PATRONI_URL   this member's REST API (default http://127.0.0.1:8008)
#   PATRONI_NAME  this member's Patroni name (default $POD_NAME)
set -u
api=${PATRONI_URL:-http://127.0.0.1:8008}
me=${PATRONI_NAME:-${POD_NAME:-}}
[ -n "$me" ] || { echo "set PATRONI_NAME or POD_NAME to this member's Patroni name"; exit 2; }

# code PATH: the HTTP status of GET $api/PATH ("000": no answer).
code() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$api/$1"; }

# members: GET /cluster, one member's JSON object a line (Patroni's own view, from its DCS).
members() {
	printf '%s\n' "$1" | sed 's/{"name"/\
{"name"/g' | grep '^{"name"'
}
# str MEMBER KEY, num MEMBER KEY: the value of "KEY": "text" or "KEY": number in a member's line.
str() { printf '%s\n' "$1" | sed -n "s/.*\"$2\": \"\([^\"]*\)\".*/\1/p"; }
num() { printf '%s\n' "$1" | sed -n "s/.*\"$2\": \([0-9][0-9]*\).*/\1/p"; }

# leader: "name api_url" of the member holding the leader lock, from GET /cluster.
leader() {
	members "$(curl -sf --max-time 5 "$api/cluster")" | grep '"role": "leader"' |
		sed -n 's/^{"name": "\([^"]*\)".*"api_url": "\([^"]*\)".*/\1 \2/p'
}

# unable MEMBER MAX LEADER_TIMELINE: why Patroni would not promote that member, in the order
# Patroni checks (its REST API answers; no nofailover tag; PostgreSQL runs and reports a WAL
# position within maximum_lag_on_failover of the leader's; the leader's timeline), or nothing.
unable() {
	_n=$(str "$1" name) _url=$(str "$1" api_url) _lag=$(num "$1" lag) _tl=$(num "$1" timeline)
	_state=$(str "$1" state)
	case $1 in
	*'"nofailover": true'*) echo "$_n has the tag nofailover"; return ;;
	*'"failover_priority": 0,'* | *'"failover_priority": 0}'*) echo "$_n has failover_priority 0"; return ;;
	esac
	if [ -n "$_url" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$_url")" = 000 ]; then
		echo "$_n's Patroni does not answer"; return
	fi
	case $_state in running | streaming) ;; *)
		echo "$_n is ${_state:-in no state}"; return ;;
	esac
	if [ -z "$_lag" ]; then
		echo "$_n's lag is unknown"
	elif [ "$_lag" -gt "$2" ]; then
		echo "$_n lags $_lag bytes (maximum_lag_on_failover $2)"
	elif [ -n "$3" ] && [ -n "$_tl" ] && [ "$_tl" -lt "$3" ]; then
		echo "$_n is on timeline $_tl, behind the leader's $3"
	fi
}

# refusal: why Patroni let no member take over from this one, from GET /cluster and /config:
# each other member and what keeps it from leading.
refusal() {
	_view=$(curl -sf --max-time 5 "$api/cluster") || { echo "Patroni's /cluster does not answer"; return; }
	case $_view in *'"pause": true'*)
		echo "the cluster is paused (patronictl pause): Patroni switches over only to a named member until it is resumed"
		return ;;
	esac
	_max=$(curl -sf --max-time 5 "$api/config" | sed -n 's/.*"maximum_lag_on_failover": \([0-9][0-9]*\).*/\1/p')
	_max=${_max:-1048576}
	_all=$(members "$_view")
	_ltl=$(num "$(printf '%s\n' "$_all" | grep "^{\"name\": \"$me\"")" timeline)
	_why= _able=
	while IFS= read -r _m; do
		[ -n "$_m" ] && [ "$(str "$_m" name)" != "$me" ] || continue
		_r=$(unable "$_m" "$_max" "$_ltl")
		if [ -n "$_r" ]; then
			_why="${_why:+$_why; }$_r"
		else
			_able="${_able:+$_able, }$(str "$_m" name)"
		fi
	done <<EOF
$_all
EOF
	if [ -n "$_able" ]; then
		echo "Patroni let no member take over from $me, though $_able looked able${_why:+ ($_why)}: see Patroni's log on $me"
	elif [ -n "$_why" ]; then
		echo "no member can take over from $me: $_why"
	else
		echo "no member can take over from $me: no other member is registered in Patroni (their Patroni is down or not started)"
	fi
}

case ${1:-} in
evacuate)
	# Safe to run again: a member that is not the leader has nothing to hand over.
	case $(code leader) in
	503) echo "$me is not the leader: nothing to hand over"; exit 0 ;;
	200) ;;
	*) echo "cannot reach Patroni at $api"; exit 1 ;;
	esac
	# Patroni picks a healthy replica within maximum_lag_on_failover, demotes this
	# member (its last WAL reaches the replicas before it stops) and promotes that one;
	# it refuses (412, or 503 "Switchover failed") when no replica qualifies.
	out=$(curl -s --max-time 45 -w '\n%{http_code}' -X POST -H 'Content-Type: application/json' \
		-d "{\"leader\": \"$me\"}" "$api/switchover")
	status=$(printf '%s\n' "$out" | tail -n 1)
	body=$(printf '%s\n' "$out" | sed '$d' | tr '\n' ' ' | sed 's/ *$//')
	case $status in
	200) echo "switchover from $me: $body"; exit 0 ;;
	000) echo "Patroni at $api did not answer the switchover within 45s"; exit 1 ;;
	esac
	case $body in
	*"status unknown"*)
		echo "the switchover from $me did not finish within Patroni's wait (HTTP $status: $body); the next attempt sees how it ended" ;;
	*"failed to write"*)
		echo "Patroni could not write the switchover into its DCS (HTTP $status: $body)" ;;
	*"sync_standby"*)
		echo "no member can take over from $me: synchronous mode, and no synchronous standby is ready (HTTP $status: $body)" ;;
	*"leader name does not match"*)
		echo "$me no longer holds the leader lock (HTTP $status: $body)" ;;
	*)
		echo "$(refusal) [HTTP $status: $body]" ;;
	esac
	exit 1
	;;
status)
	case $(code leader) in
	200) printf 'InProgress\n%s is still the leader\n' "$me"; exit 0 ;;
	503) ;;
	*) printf 'InProgress\ncannot reach Patroni at %s\n' "$api"; exit 0 ;;
	esac
	set -- $(leader)
	if [ $# -ne 2 ] || [ "$1" = "$me" ]; then
		printf 'InProgress\nno other member holds the leader lock\n'; exit 0
	fi
	# 200 from /primary: it holds the leader lock; role master: out of recovery.
	primary=$(curl -s --max-time 5 -w '\n%{http_code}' "${2%/patroni}/primary")
	if [ "$(printf '%s\n' "$primary" | tail -n 1)" = 200 ] &&
		printf '%s\n' "$primary" | grep -qE '"role": "(master|primary)"'; then
		printf 'Completed\n%s leads and accepts writes; %s is not the leader\n' "$1" "$me"; exit 0
	fi
	printf 'InProgress\n%s holds the leader lock but does not run as a writable primary yet\n' "$1"; exit 0
	;;
*)
	echo "usage: patroni.sh evacuate|status"; exit 2
	;;
esac
