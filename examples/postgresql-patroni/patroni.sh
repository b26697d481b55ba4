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

# leader: "name api_url" of the member holding the leader lock, from GET /cluster.
leader() {
	curl -sf --max-time 5 "$api/cluster" | sed 's/{"name"/\
{"name"/g' | grep '"role": "leader"' |
		sed -n 's/^{"name": "\([^"]*\)".*"api_url": "\([^"]*\)".*/\1 \2/p'
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
	# it refuses (412) when no replica qualifies.
	out=$(curl -s --max-time 45 -w '\n%{http_code}' -X POST -H 'Content-Type: application/json' \
		-d "{\"leader\": \"$me\"}" "$api/switchover")
	status=$(printf '%s\n' "$out" | tail -n 1)
	body=$(printf '%s\n' "$out" | sed '$d' | tr '\n' ' ')
	if [ "$status" = 200 ]; then
		echo "switchover from $me: $body"
		exit 0
	fi
	echo "switchover from $me refused or not finished (HTTP $status): ${body:-no answer}"
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
