#!/bin/sh
# The steps of vacate's RabbitMQ recipe that argv alone cannot express
# (docs/recipes/rabbitmq.md). POSIX sh, rabbitmqctl, rabbitmq-queues, sed,
# awk and od only; writes no file. The node is the one this sidecar serves,
# $RABBITMQ_NODENAME.
#
#   rabbitmq.sh status maintenance   Completed once the node leads no quorum
#                                    queue and each of its queues keeps a
#                                    majority without it; names the classic
#                                    queues unavailable while it is away (or,
#                                    with CLASSIC_QUEUES_IN_MAINTENANCE=wait,
#                                    waits until they are empty)
#   rabbitmq.sh status decommission  Completed once the node is a member of no
#                                    quorum queue, the home of no classic
#                                    queue that lives nowhere else, and the
#                                    only online replica of no stream
#   rabbitmq.sh exclusive            refuses while an exclusive queue on the
#                                    node holds messages (it cannot be moved)
#   rabbitmq.sh shrink               removes the node from every quorum queue,
#                                    once every other member of each is online,
#                                    and records which (for grow)
#   rabbitmq.sh move                 moves every classic queue that lives only
#                                    on the node, with its messages, to the
#                                    other nodes (classic mirroring: RabbitMQ
#                                    3.x), keeping its name
#   rabbitmq.sh unmove               takes away the policies move set
#   rabbitmq.sh grow                 makes the node a member again of the
#                                    quorum queues this drain's shrink took it
#                                    out of, and of no other
set -eu
node=${RABBITMQ_NODENAME:?RABBITMQ_NODENAME must name the node this sidecar serves}
# How long one run of move waits for the queues to move before it exits
# non-zero (vacate-hook runs it again after retryInterval); below its timeout.
move_wait=${MOVE_WAIT_SECONDS:-240}

vhosts() { rabbitmqctl -q list_vhosts --no-table-headers name; }

# each_vhost CMD: runs CMD VHOST for every virtual host, each line of its
# output prefixed with the vhost and a tab.
each_vhost() {
	vs=$(vhosts)
	saved=$IFS
	IFS='
'
	set -f
	for vhost in $vs; do
		"$1" "$vhost" | awk -F '\t' -v vh="$vhost" '{ gsub(/\t/, " ", vh); print vh "\t" $0 }'
	done
	set +f
	IFS=$saved
}

# replicated prints, for every quorum queue and stream: vhost TAB type TAB
# leader TAB [members] TAB [online] TAB name; only TYPE keeps the lines of
# one type, without it. queues prints the quorum queues' lines.
replicated_of() {
	rabbitmqctl -q list_queues -p "$1" --no-table-headers type leader members online name |
		awk -F '\t' '$1 == "quorum" || $1 == "stream"'
}
only() { awk -F '\t' -v t="$1" '$2 == t { s = $1; for (i = 3; i <= NF; i++) s = s "\t" $i; print s }'; }
queues() { each_vhost replicated_of | only quorum; }

# classic prints, for every classic queue: vhost TAB home TAB mirrors (the
# nodes of its synchronised mirrors, comma-separated) TAB exclusive TAB
# messages TAB policy TAB name. A queue's home is the node of its master's
# pid, <rabbit@host.N.N.N>.
classic_of() {
	rabbitmqctl -q list_queues -p "$1" --no-table-headers type pid synchronised_slave_pids exclusive messages policy name |
		awk -F '\t' '
		function node(pid) { sub(/^</, "", pid); sub(/\.[0-9]+\.[0-9]+\.[0-9]+>$/, "", pid); return pid }
		$1 == "classic" {
			m = $3; gsub(/^\[|\]$/, "", m); n = split(m, ps, ", "); mirrors = ""
			for (i = 1; i <= n; i++) if (ps[i] != "") mirrors = mirrors (mirrors == "" ? "" : ",") node(ps[i])
			name = $7; for (i = 8; i <= NF; i++) name = name " " $i
			print node($2) "\t" mirrors "\t" $4 "\t" $5 "\t" $6 "\t" name
		}'
}
classic() { each_vhost classic_of; }

# alone reads classic's lines and prints those of the queues homed on this
# node with no synchronised mirror elsewhere: their messages exist only here.
alone() {
	awk -F '\t' -v node="$node" '
	$2 == node {
		n = split($3, ms, ","); elsewhere = 0
		for (i = 1; i <= n; i++) if (ms[i] != "" && ms[i] != node) elsewhere = 1
		if (!elsewhere) print
	}'
}

# judge reads queues' lines, then a line "--", then alone's lines, then a
# line "--", then the streams' lines (as queues'), and prints the verdict for one question: status maintenance or decommission
# (JSON, as vacate-hook reads it), shrink (the quorum queues that block a
# shrink, one a line) or exclusive (the exclusive queues with messages).
judge() {
	awk -F '\t' -v node="$node" -v what="$1" -v wait="${CLASSIC_QUEUES_IN_MAINTENANCE:-pause}" '
	function nodes(list, arr) { gsub(/^\[|\]$/, "", list); if (list == "") return 0; return split(list, arr, ", ") }
	function json(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); gsub(/[\001-\037]/, " ", s); return s }
	function qname(name, vh) { return "queue \047" name "\047 in vhost \047" vh "\047" }
	$0 == "--" { part++; next }
	part == 0 && NF >= 5 {
		name = $5; for (i = 6; i <= NF; i++) name = name " " $i
		q = qname(name, $1)
		nm = nodes($3, m); no = nodes($4, o)
		member = 0; for (i = 1; i <= nm; i++) if (m[i] == node) member = 1
		if (!member) next
		queues++; if (mq == "") mq = q
		up = 0; for (i = 1; i <= no; i++) if (o[i] != node) up++
		if ($2 == node) { leads++; if (lq == "") lq = q }
		if (up < int(nm / 2) + 1) { critical++; if (cq == "") cq = q " would lose its majority without " node " (" up " of " nm " members online without it)" }
		if (nm < 2) blocked[++nb] = q " has no member on another node"
		else if (up < nm - 1) blocked[++nb] = q " has " up " of its " nm - 1 " other members online"
		next
	}
	part == 1 && NF >= 7 {
		name = $7; for (i = 8; i <= NF; i++) name = name " " $i
		q = "classic " qname(name, $1) " (" $5 " message" ($5 == 1 ? "" : "s") ")"
		if ($4 == "true") {
			if ($5 > 0) { excl[++ne] = "exclusive " q; exmsgs += $5 }
			next
		}
		classics++; msgs += $5
		if (cl == "") cl = q; else if (classics <= 5) cl = cl ", " q
		if ($5 > 0) { full++; fmsgs += $5; if (fl == "") fl = q; else if (full <= 5) fl = fl ", " q; fi[full] = q }
		else ei[++empty] = q
		next
	}
	part == 2 && NF >= 5 {
		name = $5; for (i = 6; i <= NF; i++) name = name " " $i
		nm = nodes($3, m); no = nodes($4, o)
		member = 0; for (i = 1; i <= nm; i++) if (m[i] == node) member = 1
		up = 0; for (i = 1; i <= no; i++) if (o[i] != node) up++
		if (!member || up > 0) next
		# A stream with no replica online but the one on this node: its messages are here only.
		streams++; q = "stream \047" name "\047 in vhost \047" $1 "\047"
		if (sl == "") sl = q; else if (streams <= 5) sl = sl ", " q
		si[streams] = q
	}
	function say(state, msg, remaining) { printf "{\"state\":\"%s\",\"message\":\"%s\",\"remaining\":%d}\n", state, json(msg), remaining }
	function more(n, shown) { return n > shown ? " and " n - shown " more" : "" }
	# unavailable lists what lives only on the node, those holding messages
	# first: at most five, then how many more.
	function unavailable(   l, n, i) {
		for (i = 1; i <= full && n < 5; i++) { l = l (n++ ? ", " : "") fi[i] }
		for (i = 1; i <= streams && n < 5; i++) { l = l (n++ ? ", " : "") si[i] }
		for (i = 1; i <= empty && n < 5; i++) { l = l (n++ ? ", " : "") ei[i] }
		return l more(classics + streams, n)
	}
	END {
		if (what == "shrink") { for (i = 1; i <= nb; i++) print blocked[i]; exit }
		if (what == "exclusive") { for (i = 1; i <= ne; i++) print excl[i]; exit }
		if (what == "decommission") {
			if (ne > 0) say("InProgress", "the " excl[1] " lives only on " node " and cannot be moved: its messages go with its connection; consume them or close the connection" more(ne, 1), exmsgs)
			else if (streams > 0) say("InProgress", "the " sl more(streams, 5) " has no replica online but on " node ", and this recipe moves no stream: add a replica on another node (rabbitmq-streams add_replica) or delete it", streams)
			else if (classics > 0) say("InProgress", node " is still the only home of " classics " classic queue(s) (" msgs " messages): " cl more(classics, 5) "; moving them to the other nodes", msgs + classics)
			else if (queues > 0) say("InProgress", node " is still a member of " queues " quorum queue(s), such as " mq, queues)
			else say("Completed", node " is a member of no quorum queue and the only home of no classic queue", 0)
			exit
		}
		if (critical > 0) { say("InProgress", cq, leads + critical); exit }
		if (leads > 0) { say("InProgress", node " still leads " leads " quorum queue(s), such as " lq, leads); exit }
		done = node " leads none of its " queues + 0 " quorum queue(s); each keeps a majority without it"
		if (wait == "wait" && full > 0) { say("InProgress", "waiting until the classic queue(s) that live only on " node " are empty (CLASSIC_QUEUES_IN_MAINTENANCE=wait): " fl more(full, 5) "; it leads none of its " queues + 0 " quorum queue(s)", fmsgs); exit }
		# What is unavailable first: a status message is cut after 256 characters.
		if (classics + streams > 0) done = "unavailable until " node " returns, living only there (" msgs " messages): " unavailable() "; it leads none of its " queues + 0 " quorum queue(s), each keeps a majority without it"
		say("Completed", done, 0)
	}'
}

# verdict QUESTION: the judge's verdict on the cluster as it is now.
verdict() {
	replicated=$(each_vhost replicated_of)
	{
		printf '%s\n' "$replicated" | only quorum
		echo "--"
		classic | alone
		echo "--"
		printf '%s\n' "$replicated" | only stream
	} | judge "$1"
}

# peers prints the running nodes other than this one that are not in
# maintenance: where classic queues may move.
peers() {
	rabbitmqctl -q cluster_status | sed 's/\x1b\[[0-9;]*m//g' | awk -v node="$node" '
	NF == 0 { next }
	/^Running Nodes/ { sec = "running"; next }
	!/@/ { sec = "" }
	sec == "running" && NF == 1 { running[$1] = 1 }
	/^Node: .*, status: / { n = $2; sub(/,$/, "", n); if ($0 !~ /not under maintenance/) maint[n] = 1 }
	END { for (n in running) if (n != node && !(n in maint)) print n }'
}

# policy_name is the name of the policy that moves one queue: vacate-move-
# and a checksum of its vhost and name.
policy_name() { printf 'vacate-move-%s' "$(printf '%s\n%s' "$1" "$2" | cksum | awk '{print $1}')"; }

# move_one VHOST NAME PEERS: sets the policy that moves a queue, keeping the
# definition of the policy that applies to it now (ha-* keys aside) at a
# higher priority. Classic mirroring to the other nodes only: RabbitMQ moves
# the queue's master to a synchronised mirror there, with its messages, and
# clients keep using it by name.
move_one() {
	vh=$1 name=$2 peers=$3
	pol=$(policy_name "$vh" "$name")
	current=$(rabbitmqctl -q list_queues -p "$vh" --no-table-headers name policy | awk -F '\t' -v q="$name" '{ n = $1; for (i = 2; i < NF; i++) n = n "\t" $i; if (n == q) print $NF }')
	[ "$current" = "$pol" ] && return 0
	policies=$(rabbitmqctl -q list_policies -p "$vh" --no-table-headers)
	def=$(printf '%s\n' "$policies" | awk -F '\t' -v p="$current" '$2 == p { print $5 }')
	prio=$(printf '%s\n' "$policies" | awk -F '\t' 'BEGIN { m = 0 } $6 + 0 > m { m = $6 + 0 } END { print m + 1 }')
	pattern=$(printf '%s' "$name" | sed 's/[][\\.^$*+?(){}|/-]/\\&/g')
	merged=$(printf '%s' "${def:-{\}}" | awk -v peers="$peers" '
	{
		s = $0; sub(/^[ \t]*\{/, "", s); sub(/\}[ \t]*$/, "", s)
		out = ""; depth = 0; quoted = 0; cur = ""
		for (i = 1; i <= length(s); i++) {
			c = substr(s, i, 1)
			if (quoted) { cur = cur c; if (c == "\\") { i++; cur = cur substr(s, i, 1) } else if (c == "\"") quoted = 0; continue }
			if (c == "\"") quoted = 1
			if (c == "[" || c == "{") depth++
			if (c == "]" || c == "}") depth--
			if (c == "," && depth == 0) { keep(cur); cur = ""; continue }
			cur = cur c
		}
		keep(cur)
		n = split(peers, ps, " "); list = ""
		for (i = 1; i <= n; i++) list = list (list == "" ? "" : ",") "\"" ps[i] "\""
		printf "{%s%s\"ha-mode\":\"nodes\",\"ha-params\":[%s],\"ha-sync-mode\":\"automatic\"}\n", out, (out == "" ? "" : ","), list
	}
	function keep(member) {
		if (member ~ /^[ \t]*$/ || member ~ /^[ \t]*"ha-/) return
		out = out (out == "" ? "" : ",") member
	}')
	rabbitmqctl -q set_policy -p "$vh" --apply-to queues --priority "$prio" "$pol" "^$pattern\$" "$merged" >/dev/null
}

# unmove takes away every policy move set, in every vhost.
unmove_of() { rabbitmqctl -q list_policies -p "$1" --no-table-headers | awk -F '\t' '$2 ~ /^vacate-move-[0-9]+$/ { print $2 }'; }
unmove() {
	each_vhost unmove_of | awk -F '\t' -v us="$(printf '\037')" '{ print $1 us $2 }' | while IFS=$(printf '\037') read -r vh pol; do
		rabbitmqctl -q clear_policy -p "$vh" "$pol" >/dev/null </dev/null # it would read the loop's input
	done
}

# What shrink took away is recorded in the cluster itself, where a restarted
# sidecar or a replaced pod finds it: the global runtime parameter
# vacate-shrunk-NODE, a JSON array whose first string is the drain's UID
# (VACATE_DRAIN) and each other one a queue's vhost and name, separated by a
# unit separator, in hexadecimal (any character may be in either).
record="vacate-shrunk-$node"
drain=${VACATE_DRAIN:-by-hand}
us=$(printf '\037')
hex() { od -An -v -tx1 | tr -d ' \n'; }
unhex() {
	LC_ALL=C awk '{
		s = ""
		for (i = 1; i < length($0); i += 2)
			s = s sprintf("%c", (index("0123456789abcdef", substr($0, i, 1)) - 1) * 16 + index("0123456789abcdef", substr($0, i + 1, 1)) - 1)
		print s
	}'
}

# recorded prints the record's strings, one a line (the queues still in
# hexadecimal), if there is one.
recorded() {
	rabbitmqctl -q list_global_parameters --no-table-headers |
		awk -F '\t' -v r="$record" '$1 == r { v = $2; gsub(/[][" ]/, "", v); n = split(v, s, ","); for (i = 1; i <= n; i++) print s[i] }'
}

# remember records the quorum queues the node is a member of now, with those
# this drain recorded before (a shrink run again), before shrink.
remember() {
	before=$(recorded)
	if [ "$(printf '%s\n' "$before" | head -n 1)" = "$drain" ]; then
		before=$(printf '%s\n' "$before" | tail -n +2)
	else
		before=""
	fi
	now=$(queues | awk -F '\t' -v node="$node" -v us="$us" '
		{ m = $3; gsub(/^\[|\]$/, "", m); n = split(m, ms, ", "); for (i = 1; i <= n; i++) if (ms[i] == node) { name = $5; for (j = 6; j <= NF; j++) name = name "\t" $j; print $1 us name } }' |
		while IFS= read -r q; do printf '%s' "$q" | hex; echo; done)
	value=$(printf '%s\n%s\n' "$before" "$now" | awk -v d="$drain" 'BEGIN { printf "[\"%s\"", d } NF && !seen[$0]++ { printf ",\"%s\"", $0 } END { print "]" }')
	rabbitmqctl -q set_global_parameter "$record" "$value" >/dev/null
}

# grow gives the node back the quorum queues this drain's shrink took it out
# of, then forgets the record. A queue deleted since is skipped.
grow() {
	rec=$(recorded)
	if [ -z "$rec" ] || [ "$(printf '%s\n' "$rec" | head -n 1)" != "$drain" ]; then
		echo "this drain took $node out of no quorum queue"
		return 0
	fi
	printf '%s\n' "$rec" | tail -n +2 | unhex | while IFS=$us read -r vh name; do
		if out=$(rabbitmq-queues -q add_member --vhost "$vh" "$name" "$node" </dev/null 2>&1); then
			echo "$node is a member of quorum queue '$name' in vhost '$vh' again"
			continue
		fi
		case "$out" in
		*already*) ;;
		*not_found* | *"not found"*) echo "quorum queue '$name' in vhost '$vh' is gone: nothing to give back" ;;
		*)
			echo "not giving $node back quorum queue '$name' in vhost '$vh': $(printf '%s\n' "$out" | tail -n 1)"
			exit 1
			;;
		esac
	done
	rabbitmqctl -q clear_global_parameter "$record" >/dev/null
}

move() {
	deadline=$(($(date +%s) + move_wait))
	while :; do
		left=$(classic | alone | awk -F '\t' '$4 != "true"')
		if [ -z "$left" ]; then
			unmove
			echo "no classic queue lives only on $node"
			return 0
		fi
		p=$(peers | sort | tr '\n' ' ' | sed 's/ $//')
		if [ -z "$p" ]; then
			first=$(printf '%s\n' "$left" | head -n 1)
			echo "not moving classic queue '$(printf '%s' "$first" | cut -f 7-)' in vhost '$(printf '%s' "$first" | cut -f 1)' ($(printf '%s' "$first" | cut -f 5) messages): no other running node out of maintenance takes it"
			return 1
		fi
		# vhost and name, split by a unit separator: tabs collapse when read
		# splits on them, and a field may be empty.
		printf '%s\n' "$left" | awk -F '\t' -v us="$us" '{ n = $7; for (i = 8; i <= NF; i++) n = n "\t" $i; print $1 us n }' |
			while IFS=$us read -r vh name; do
				move_one "$vh" "$name" "$p" </dev/null # rabbitmqctl would read the loop's input
			done
		if [ "$(date +%s)" -ge "$deadline" ]; then
			first=$(printf '%s\n' "$left" | head -n 1)
			echo "still moving $(printf '%s\n' "$left" | wc -l | tr -d ' ') classic queue(s) off $node, such as '$(printf '%s' "$first" | cut -f 7-)' in vhost '$(printf '%s' "$first" | cut -f 1)' ($(printf '%s' "$first" | cut -f 5) messages): its mirrors on $p are not synchronised yet"
			return 1
		fi
		sleep 2
	done
}

case "${1:-}" in
status)
	case "${2:-}" in
	maintenance | decommission) ;;
	*) echo "usage: $0 status maintenance|decommission" >&2; exit 2 ;;
	esac
	verdict "$2"
	;;
exclusive)
	held=$(verdict exclusive)
	if [ -n "$held" ]; then
		printf '%s\n' "$held"
		echo "not draining $node: the $(printf '%s\n' "$held" | head -n 1) cannot be moved (its messages go with its connection); consume them or close the connection"
		exit 1
	fi
	;;
shrink)
	blocked=$(queues | judge shrink)
	if [ -n "$blocked" ]; then
		printf '%s\n' "$blocked"
		echo "not removing $node from its quorum queues: $(printf '%s\n' "$blocked" | head -n 1)"
		exit 1
	fi
	remember
	rabbitmq-queues shrink "$node" --errors-only
	left=$(queues | judge decommission)
	case "$left" in
	*'"state":"Completed"'*) ;;
	*) echo "shrink left $node a member of quorum queues: $left"; exit 1 ;;
	esac
	;;
move)
	move
	;;
unmove)
	unmove
	;;
grow)
	grow
	;;
*)
	echo "usage: $0 status maintenance|decommission | exclusive | shrink | move | unmove | grow" >&2
	exit 2
	;;
esac
