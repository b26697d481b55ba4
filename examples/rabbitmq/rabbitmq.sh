#!/bin/sh
# The steps of vacate's RabbitMQ recipe that argv alone cannot express
# (docs/recipes/rabbitmq.md). POSIX sh, rabbitmqctl, rabbitmq-queues and awk
# only; writes no file. The node is the one this sidecar serves,
# $RABBITMQ_NODENAME.
#
#   rabbitmq.sh status maintenance   Completed once the node leads no quorum
#                                    queue and each of its queues keeps a
#                                    majority without it
#   rabbitmq.sh status decommission  Completed once the node is a member of no
#                                    quorum queue
#   rabbitmq.sh shrink               removes the node from every quorum queue,
#                                    once every other member of each is online
#   rabbitmq.sh grow                 makes the node a member of every quorum
#                                    queue again
set -eu
node=${RABBITMQ_NODENAME:?RABBITMQ_NODENAME must name the node this sidecar serves}

# queues prints, for every quorum queue in every virtual host, one line:
# vhost TAB leader TAB [members] TAB [online] TAB name.
queues() {
	vhosts=$(rabbitmqctl -q list_vhosts --no-table-headers name)
	all=
	saved=$IFS
	IFS='
'
	set -f
	for vhost in $vhosts; do
		out=$(rabbitmqctl -q list_queues -p "$vhost" --no-table-headers type leader members online name)
		all="$all$(printf '%s\n' "$out" | awk -F '\t' -v vh="$vhost" '$1 == "quorum" { gsub(/\t/, " ", vh); sub(/^quorum\t/, ""); print vh "\t" $0 }')
"
	done
	set +f
	IFS=$saved
	printf '%s' "$all"
}

# judge reads queues' lines and prints the verdict for one question: status
# (JSON, as vacate-hook reads it) or shrink (the queues that block a shrink,
# one a line).
judge() {
	awk -F '\t' -v node="$node" -v what="$1" '
	function nodes(list, arr) { gsub(/^\[|\]$/, "", list); if (list == "") return 0; return split(list, arr, ", ") }
	function json(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); gsub(/[\001-\037]/, " ", s); return s }
	NF >= 5 {
		name = $5; for (i = 6; i <= NF; i++) name = name " " $i
		q = "queue \047" name "\047 in vhost \047" $1 "\047"
		nm = nodes($3, m); no = nodes($4, o)
		member = 0; for (i = 1; i <= nm; i++) if (m[i] == node) member = 1
		if (!member) next
		queues++; if (mq == "") mq = q
		up = 0; for (i = 1; i <= no; i++) if (o[i] != node) up++
		if ($2 == node) { leads++; if (lq == "") lq = q }
		if (up < int(nm / 2) + 1) { critical++; if (cq == "") cq = q " would lose its majority without " node " (" up " of " nm " members online without it)" }
		if (nm < 2) blocked[++nb] = q " has no member on another node"
		else if (up < nm - 1) blocked[++nb] = q " has " up " of its " nm - 1 " other members online"
	}
	function say(state, msg, remaining) { printf "{\"state\":\"%s\",\"message\":\"%s\",\"remaining\":%d}\n", state, json(msg), remaining }
	END {
		if (what == "shrink") { for (i = 1; i <= nb; i++) print blocked[i]; exit }
		if (what == "decommission") {
			if (queues > 0) say("InProgress", node " is still a member of " queues " quorum queue(s), such as " mq, queues)
			else say("Completed", node " is a member of no quorum queue", 0)
			exit
		}
		if (critical > 0) say("InProgress", cq, leads + critical)
		else if (leads > 0) say("InProgress", node " still leads " leads " quorum queue(s), such as " lq, leads)
		else say("Completed", node " leads none of its " queues " quorum queue(s); each keeps a majority without it", 0)
	}'
}

case "${1:-}" in
status)
	case "${2:-}" in
	maintenance | decommission) ;;
	*) echo "usage: $0 status maintenance|decommission" >&2; exit 2 ;;
	esac
	list=$(queues)
	printf '%s\n' "$list" | judge "$2"
	;;
shrink)
	list=$(queues)
	blocked=$(printf '%s\n' "$list" | judge shrink)
	if [ -n "$blocked" ]; then
		printf '%s\n' "$blocked"
		echo "not removing $node from its quorum queues: $(printf '%s\n' "$blocked" | head -n 1)"
		exit 1
	fi
	rabbitmq-queues shrink "$node" --errors-only
	list=$(queues)
	left=$(printf '%s\n' "$list" | judge decommission)
	case "$left" in
	*'"state":"Completed"'*) ;;
	*) echo "shrink left $node a member of quorum queues: $left"; exit 1 ;;
	esac
	;;
grow)
	exec rabbitmq-queues grow "$node" all
	;;
*)
	echo "usage: $0 status maintenance|decommission | shrink | grow" >&2
	exit 2
	;;
esac
