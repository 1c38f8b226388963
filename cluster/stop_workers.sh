#!/usr/bin/env bash
# Stop Ray on the measuring workers of a cluster file, after `ray down`:
#
#   ray down cluster/config.yaml && bash cluster/stop_workers.sh cluster/config.yaml
#
# With provider `local`, Ray 2.60's `ray down` runs `ray stop` on the head only and
# marks the workers as terminated; their raylets exit about a minute after the head
# is gone, but other Ray processes of theirs stay. This runs `ray stop` on each of
# the file's worker_ips over SSH, as the file's ssh_user with its ssh_private_key,
# the way the launcher runs its commands (a login shell that reads ~/.bashrc).
set -euo pipefail
CONFIG=${1:?usage: bash cluster/stop_workers.sh CLUSTER.yaml}
python3 - "$CONFIG" <<'PY' | while read -r user key ip; do
import os, sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
key = os.path.expanduser(c["auth"].get("ssh_private_key") or "-")
for ip in c["provider"]["worker_ips"]:
    print(c["auth"]["ssh_user"], key, ip)
PY
    opts=(-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o ConnectTimeout=10 -o LogLevel=ERROR)
    [[ $key == - ]] || opts+=(-i "$key")
    if ssh "${opts[@]}" "$user@$ip" "bash --login -c 'source ~/.bashrc; ray stop'" < /dev/null > /dev/null 2>&1; then
        echo "stopped Ray on $ip"
    else
        echo "could not stop Ray on $ip" >&2
    fi
done
