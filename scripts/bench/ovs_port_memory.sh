#!/bin/sh
# ovs_port_memory.sh [yes|no] [STEP...]: what a port costs the host's ovs-vswitchd, with
# and without --mlockall (ovs-ctl's default), measured on an ovs-vswitchd of our own so
# the host's is never restarted: its own network namespace (mem31-ovs-MLOCK), run
# directory and database, set up as scripts/setup sets up the host's (userspace datapath,
# userspace TSO). Veth ports are added in steps (default 60 60) and the daemon's RSS,
# locked and PSS figures printed after each; everything is removed at the end.
# Run as root, holding /tmp/nestednet-system.lock. Figures: docs/setup.md, "Memory".
set -eu
ml=${1:-no}; [ $# -gt 0 ] && shift
steps=${*:-60 60}
ns=ovsmem-$ml-$$; run=$(mktemp -d /tmp/ovsmem.XXXXXX)
export OVS_RUNDIR=$run OVS_LOGDIR=$run OVS_DBDIR=$run
X="ip netns exec $ns"
V="ovs-vsctl --db=unix:$run/db.sock"
cleanup() {
    [ -f "$run/ovs-vswitchd.pid" ] && kill "$(cat "$run/ovs-vswitchd.pid")" 2>/dev/null
    [ -f "$run/ovsdb-server.pid" ] && kill "$(cat "$run/ovsdb-server.pid")" 2>/dev/null
    ip netns del "$ns" 2>/dev/null
    rm -rf "$run"
}
trap cleanup EXIT INT TERM
ip netns add "$ns"
ovsdb-tool create "$run/conf.db" /usr/share/openvswitch/vswitch.ovsschema
$X ovsdb-server "$run/conf.db" --remote="punix:$run/db.sock" --pidfile="$run/ovsdb-server.pid" \
    --detach --log-file="$run/ovsdb-server.log"
$V --no-wait init -- set Open_vSwitch . other_config:userspace-tso-enable=true
flag=; [ "$ml" = yes ] && flag=--mlockall
$X ovs-vswitchd "unix:$run/db.sock" $flag --pidfile="$run/ovs-vswitchd.pid" --detach \
    --log-file="$run/ovs-vswitchd.log"
$V add-br ovsmem -- set bridge ovsmem datapath_type=netdev
n=0
report() {
    sleep 5
    pid=$(cat "$run/ovs-vswitchd.pid")
    printf 'mlockall=%s ports=%d %s %s\n' "$ml" "$n" \
        "$(awk '/^(VmRSS|VmLck):/ {printf "%s%d ", $1, $2 / 1024}' "/proc/$pid/status")" \
        "$(awk '/^Pss:/ {printf "Pss:%d", $2 / 1024}' "/proc/$pid/smaps_rollup")"
}
report
for step in $steps; do
    i=0; args=
    while [ "$i" -lt "$step" ]; do
        n=$((n + 1)); i=$((i + 1))
        $X ip link add "p$n" type veth peer name "q$n"
        $X ip link set "p$n" up; $X ip link set "q$n" up
        args="$args -- add-port ovsmem p$n"
    done
    # shellcheck disable=SC2086 (one argument list, split on purpose)
    $V --timeout=300 $args
    report
done
echo "(MB)"
