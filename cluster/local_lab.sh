#!/usr/bin/env bash
# A lab cluster on one Linux machine, for trying cluster/config.yaml with Ray's own
# launcher before touching real machines.
#
#   sudo bash cluster/local_lab.sh up       # 4 hosts: a head and 3 measuring workers
#   sudo bash cluster/local_lab.sh check    # ray up, train, sweep, a worker killed, ray down
#   sudo bash cluster/local_lab.sh scale    # measurements/s on 1, 2 and 3 worker hosts
#   sudo bash cluster/local_lab.sh down     # removes what `up` made, and only that
#
# Each host is a network namespace on a private bridge (10.77.0.0/24; the
# namespaces have no route off the bridge and the machine does not forward
# their packets) with its own process namespace (so `ray stop` on one host
# sees only that host's processes), its own /tmp and home folder, and its own
# sshd (Debian's openssh-server, installed when missing). Every host has the
# same user, as lab machines do, and trusts one key made for the lab. The
# hosts share this machine's files: its Python and installed packages are
# theirs: the folders of the launching interpreter that lie under /tmp or /root
# (a venv, pyenv, a venv on pyenv's Python; cluster/lab_python.py lists them) are
# bound into every host at the same path, so the hosts run that very interpreter,
# however it was installed (venv, pyenv, conda, the system's). Its packages are
# read-only for the lab user: the config's `pip install -e` goes to the user's own
# site folder or, in a venv that has none, to a per-host layer over the venv's
# site folder, without the network the hosts do not have. Before `ray up`, `check`
# makes sure a host runs the interpreter and imports Ray and the project, and says
# in one sentence what is wrong when it cannot.
#
# `check` writes a copy of cluster/config.yaml in which only the addresses,
# the SSH user and the key differ, and runs the real `ray up`, `ray exec` and
# `ray down` on it from this machine, with a launcher home of its own that
# holds the secrets folder the config mounts (a token made as
# cluster/README.md says). It ends with one line: `LAB CHECK PASSED` or
# `LAB CHECK FAILED: <why>`. Needs root (namespaces, sshd), about 4 GB of
# memory and 5-12 minutes on 2 cores (the longer when others keep them busy).
set -euo pipefail

LAB=${HSDAG_LAB_DIR:-/var/tmp/hsdag-lab}   # not under /tmp: every host gets its own /tmp
NET=10.77.0                                # the lab's private subnet, /24
BRIDGE=hsdaglab0
LAB_USER=hsdaglab
HOSTS=(head w1 w2 w3)
declare -A IP=([head]=$NET.10 [w1]=$NET.11 [w2]=$NET.12 [w3]=$NET.13)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=$(command -v python3)
PYBIN=$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")
# Ray's command: beside the interpreter, or in its base's bin (a venv that reads the
# base's packages has no `ray` of its own); the hosts get both folders on their PATH
BASEBIN=$("$PY" -c 'import os, sys; print(os.path.join(sys.base_prefix, "bin"))')
RAYBIN=$PYBIN
[[ -x $RAYBIN/ray ]] || RAYBIN=$BASEBIN
# the interpreter's folders the hosts would not see, and those pip must write in a
# venv without a user site folder (cluster/lab_python.py)
PY_HIDDEN=$("$PY" "$ROOT/cluster/lab_python.py" --hidden /tmp,/root "$ROOT")
PY_WRITABLE=$("$PY" "$ROOT/cluster/lab_python.py" --writable)
KEY=$LAB/id_ed25519
LAUNCHER_HOME=$LAB/launcher
CONFIG=$LAB/config.yaml
SSH_OPTS=(-i "$KEY" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes
          -o ConnectTimeout=5 -o LogLevel=ERROR)

say() { printf '[lab %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
ns() { echo "hsdaglab-$1"; }

need_root() {
    [[ $(id -u) == 0 ]] || { echo "local_lab.sh needs root (network namespaces, sshd): run it with sudo" >&2; exit 2; }
}

install_sshd() {  # sshd on the hosts; rsync, which Ray's launcher copies files with
    [[ -x /usr/sbin/sshd ]] && command -v rsync >/dev/null && return
    say "installing openssh-server and rsync"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server rsync >/dev/null
}

host_up() {  # $1: host name
    local h=$1 d=$LAB/hosts/$1 n; n=$(ns "$1")
    mkdir -p "$d/tmp" "$d/home/.ssh" "$d/pymnt"
    chmod 1777 "$d/tmp"
    cp "$KEY.pub" "$d/home/.ssh/authorized_keys"
    # the machine's Python on the lab user's PATH; pip without the network the hosts lack
    printf 'export PATH=%s:%s:$PATH\nexport RAY_USAGE_STATS_ENABLED=0\n' "$PYBIN" "$BASEBIN" > "$d/home/.bashrc"
    printf '[ -f ~/.bashrc ] && . ~/.bashrc\n' > "$d/home/.profile"
    mkdir -p "$d/home/.config/pip"
    printf '[global]\nno-index = true\nbreak-system-packages = true\n[install]\nno-build-isolation = false\n' > "$d/home/.config/pip/pip.conf"
    chown -R "$LAB_USER:$LAB_USER" "$d/home"
    chmod 700 "$d/home/.ssh"
    ssh-keygen -q -t ed25519 -N '' -f "$d/ssh_host_ed25519_key" <<< y >/dev/null
    cat > "$d/sshd_config" <<EOF
ListenAddress ${IP[$h]}
HostKey $d/ssh_host_ed25519_key
PidFile none
AllowUsers $LAB_USER
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
UsePAM no
X11Forwarding no
MaxSessions 50
MaxStartups 50
EOF
    ip netns add "$n"
    echo "$n" >> "$LAB/namespaces"
    ip link add "hlv-$h" type veth peer name eth0 netns "$n"
    ip link set "hlv-$h" master "$BRIDGE" up
    ip -n "$n" addr add "${IP[$h]}/24" dev eth0
    ip -n "$n" link set lo up
    ip -n "$n" link set eth0 up
    # an on-link default route, so that Ray finds the host's address as on a real
    # machine; a packet for any address off the bridge finds no neighbour and stays
    ip -n "$n" route add default dev eth0
    # its own processes, /tmp, an empty /root and home; the launching interpreter's
    # folders under /tmp or /root kept at their paths (bound aside, then moved back
    # once the host's own /tmp and /root cover the machine's), and in a venv without
    # a user site folder a layer of the host's own over its site folder
    local keep="" back="" layer="" i=0 f
    while IFS= read -r f; do
        [[ -n $f ]] || continue
        keep+="mkdir -p $d/pymnt/$i && mount --bind $(printf %q "$f") $d/pymnt/$i && "
        back+="mkdir -p $(printf %q "$f") && mount --move $d/pymnt/$i $(printf %q "$f") && "
        i=$((i + 1))
    done <<< "$PY_HIDDEN"
    while IFS= read -r f; do
        [[ -n $f ]] || continue
        mkdir -p "$d/layer/$i/upper$f" "$d/layer/$i/work"
        chown "$LAB_USER:$LAB_USER" "$d/layer/$i/upper$f"
        layer+="mount -t overlay lab-layer -o lowerdir=$(printf %q "$f"),upperdir=$d/layer/$i/upper$(printf %q "$f"),workdir=$d/layer/$i/work $(printf %q "$f") && "
        i=$((i + 1))
    done <<< "$PY_WRITABLE"
    local inner="mount --make-rprivate / && $keep
        mount -t tmpfs -o mode=755,size=1m lab-root /root && mount --bind $d/tmp /tmp && $back $layer
        mount --bind $d/home /home/$LAB_USER && mkdir -p /run/sshd &&
        exec /usr/sbin/sshd -D -e -f $d/sshd_config"
    setsid ip netns exec "$n" unshare --pid --fork --kill-child --mount --mount-proc bash -c "$inner" \
        > "$d/sshd.log" 2>&1 < /dev/null &
    echo $! > "$d/unshare.pid"
    disown $!
}

cmd_up() {
    need_root
    if [[ -e $LAB/namespaces ]]; then say "the lab is up already ($LAB); run down first"; return; fi
    install_sshd
    mkdir -p "$LAB"
    chmod 755 "$LAB"
    touch "$LAB/.hsdag-lab"  # down removes the folder only when it holds this mark
    : > "$LAB/namespaces"
    if ! id "$LAB_USER" >/dev/null 2>&1; then
        useradd -M -d "/home/$LAB_USER" -s /bin/bash "$LAB_USER"
        usermod -p '*' "$LAB_USER"  # no password, not locked: key only
        touch "$LAB/made-user"
    fi
    [[ -d /home/$LAB_USER ]] || { mkdir -p "/home/$LAB_USER"; touch "$LAB/made-home"; }
    [[ -f $KEY ]] || ssh-keygen -q -t ed25519 -N '' -C hsdag-lab -f "$KEY"
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
        touch "$LAB/made-bridge"
    fi
    ip addr replace "$NET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for h in "${HOSTS[@]}"; do host_up "$h"; done
    for h in "${HOSTS[@]}"; do
        for _ in $(seq 60); do
            ssh "${SSH_OPTS[@]}" "$LAB_USER@${IP[$h]}" true 2>/dev/null && break
            sleep 1
        done
        ssh "${SSH_OPTS[@]}" "$LAB_USER@${IP[$h]}" true || { say "no ssh to $h"; cat "$LAB/hosts/$h/sshd.log" >&2; return 1; }
    done
    say "up: head ${IP[head]}, workers ${IP[w1]} ${IP[w2]} ${IP[w3]} (user $LAB_USER, key $KEY)"
}

check_python() {  # a host runs the launching interpreter, whose Ray it imports; else one sentence why
    local want got
    want=$("$PY" -c 'import sys; print(sys.prefix)')
    [[ -x $RAYBIN/ray ]] || { echo "Ray's command is neither in $PYBIN nor in $BASEBIN: install the project's packages into the Python that launches the lab (pip install -e .)"; return 1; }
    # the config's `pip install -e` builds the project on the hosts without the network:
    # with the interpreter's own setuptools, which must build wheels (70.1, or wheel)
    got=$(ssh "${SSH_OPTS[@]}" "$LAB_USER@${IP[head]}" "bash --login -c 'python3 -c \"
import sys, ray
try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    try:
        import wheel.bdist_wheel
    except ImportError:
        sys.exit(print(\\\"NO-WHEEL-BUILD\\\"))
print(sys.prefix)\"'" 2>&1) || true
    got=${got##*$'\n'}
    [[ $got == "$want" ]] && return 0
    if [[ $got == NO-WHEEL-BUILD ]]; then
        echo "the hosts install the project with pip and no network, so the Python that launched the lab ($PY) needs setuptools 70.1 or newer (or wheel): run $PY -m pip install -U setuptools"
    else
        echo "the lab hosts cannot run the Python that launched the lab ($PY, prefix $want): a host's python3 printed '$got'; run local_lab.sh with a Python that has the project's packages installed (pip install -e .), as root, from a folder the hosts can read"
    fi
    return 1
}

cmd_down() {
    need_root
    if [[ -f $LAB/namespaces ]]; then
        while read -r n; do
            [[ -n $n ]] || continue
            # every process in the namespace is one the lab started (its sshd and what ran under it)
            ip netns pids "$n" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
            ip netns del "$n" 2>/dev/null || true
        done < "$LAB/namespaces"
    fi
    for h in "${HOSTS[@]}"; do
        [[ -f $LAB/hosts/$h/unshare.pid ]] && kill -9 "$(cat "$LAB/hosts/$h/unshare.pid")" 2>/dev/null || true
        ip link del "hlv-$h" 2>/dev/null || true
    done
    [[ -f $LAB/made-bridge ]] && ip link del "$BRIDGE" 2>/dev/null || true
    [[ -f $LAB/made-user ]] && userdel "$LAB_USER" 2>/dev/null || true
    [[ -f $LAB/made-home ]] && rmdir "/home/$LAB_USER" 2>/dev/null || true
    # the launcher's record of the lab cluster (named by the config's cluster_name)
    rm -f /tmp/cluster-hsdag-lab.state /tmp/cluster-hsdag-lab.lock
    [[ -f $LAB/.hsdag-lab ]] && rm -rf "$LAB"
    say "down: no lab namespace, bridge, user or process left"
}

[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0  # sourced: the functions only
case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    check) source "$ROOT/cluster/lab_check.sh"; cmd_check ;;
    scale) source "$ROOT/cluster/lab_check.sh"; cmd_scale ;;
    *) echo "usage: bash cluster/local_lab.sh up|check|scale|down" >&2; exit 2 ;;
esac
