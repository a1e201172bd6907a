#!/bin/busybox sh
# /init of the rdmaflow RDMA test VM (packed into the initramfs by run.sh).
# Mounts the host's root file system read-only over virtio-9p, chroots into
# it, loads Soft-RoCE (rdma_rxe), creates rxe0 on a dummy netdev, runs the
# command run.sh left in /ctl, records its status and powers off.
/bin/busybox mkdir -p /proc /sys /dev /host /ctl /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
mount -t devtmpfs devtmpfs /dev
exec 0<>/dev/console 1>&0 2>&0
mount -t proc proc /proc
mount -t sysfs sysfs /sys
say() { echo "[rxe-vm $(cut -d' ' -f1 /proc/uptime)s] $*"; }
die() { say "FATAL: $*"; echo 125 > /ctl/rc; sync; poweroff -f; }
for m in virtio_pci 9pnet_virtio 9p; do modprobe $m || die "modprobe $m"; done
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 ctl /ctl || die "mount ctl"
echo up > /ctl/booted
. /ctl/env.sh
H=/host
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 hostroot $H \
  || die "mount the host root"
mount -t proc proc $H/proc
mount -t sysfs sysfs $H/sys
mount -t devtmpfs devtmpfs $H/dev
mkdir -p $H/dev/pts $H/dev/shm
mount -t devpts devpts $H/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $H/dev/shm
mount -t tmpfs -o mode=1777 tmpfs $H/tmp
mount -t tmpfs -o mode=755 tmpfs $H/run
mkdir -p $H/run/rxe-vm && mount --bind /ctl $H/run/rxe-vm
i=0
for d in $RW_DIRS; do
  mkdir -p "$H$d" 2>/dev/null
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 rw$i "$H$d" || die "mount $d"
  i=$((i + 1))
done
for m in rdma_rxe ib_uverbs rdma_ucm rdma_cm crc32_generic; do
  modprobe $m || say "warning: modprobe $m failed"
done
ip link set lo up
modprobe dummy numdummies=1
ip addr add 10.11.12.1/24 dev dummy0 && ip link set dummy0 up || die "dummy0"
chroot $H /bin/sh -c "rdma link add rxe0 type rxe netdev dummy0" || die "rdma link add rxe0"
# Wait for the RoCE v2 GID of 10.11.12.1 (::ffff:10.11.12.1).
gid_index=
for _ in $(seq 100); do
  for g in /sys/class/infiniband/rxe0/ports/1/gids/*; do
    if [ "$(cat $g 2>/dev/null)" = 0000:0000:0000:0000:0000:ffff:0a0b:0c01 ]; then
      gid_index=${g##*/}
      break 2
    fi
  done
  usleep 50000
done
say "rxe0 ready on dummy0 (10.11.12.1, RoCE v2 GID index ${gid_index:-none})"
chroot $H /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  RDMAFLOW_RXE_VM=1 RDMAFLOW_RXE_IP=10.11.12.1 RDMAFLOW_RXE_DEV=rxe0 \
  RDMAFLOW_RXE_GID_INDEX=$gid_index \
  /bin/sh -c 'ulimit -l unlimited; cd "$(cat /run/rxe-vm/pwd)" && exec /bin/sh /run/rxe-vm/cmd.sh'
rc=$?
say "command exited with status $rc"
echo $rc > /ctl/rc
sync
poweroff -f
