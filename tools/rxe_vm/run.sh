#!/usr/bin/env bash
# Runs a command inside a throw-away QEMU VM that has real kernel RDMA:
# Soft-RoCE (rdma_rxe) on a dummy netdev, device rxe0. The guest boots
# Debian's stock kernel (downloaded with `apt-get download`, cached; nothing
# is installed), mounts this machine's root file system read-only over
# virtio-9p and chroots into it, so the command runs the host's own binaries
# and libraries (libibverbs and its providers, UCX, freshly built tests).
# The current directory is mounted read-write at the same path; /tmp is a
# fresh tmpfs. Server and client processes run side by side in the guest
# (rxe loops traffic to its own address back).
#
#   tools/rxe_vm/run.sh 'ibv_devinfo && bazel-bin/rdma/ibverbs/some_test'
#
# Exit status: the command's; 124 on timeout; 125 when the VM could not run
# (the reason is printed; the console log is in $RXE_VM_CACHE/last-console.log).
#
# Environment (all optional):
#   RXE_VM_CACHE    kernel and initramfs cache (default ~/.cache/rdmaflow-rxe-vm)
#   RXE_VM_KPKG     kernel package (default: what linux-image-amd64 depends on)
#   RXE_VM_TIMEOUT  wall-clock limit in seconds (default 1200)
#   RXE_VM_MEM      guest memory (default 3072M)
#   RXE_VM_ACCEL    kvm | tcg | auto (default auto: KVM when it can boot a
#                   stock kernel, else TCG emulation)
#
# Host packages (tools/setup.sh installs them): qemu-system-x86,
# busybox-static, cpio, xz-utils, zstd, iproute2, rdma-core,
# ibverbs-providers. Inside the guest the command sees RDMAFLOW_RXE_VM=1,
# RDMAFLOW_RXE_DEV=rxe0, RDMAFLOW_RXE_IP and RDMAFLOW_RXE_GID_INDEX.
source "$(dirname "$0")/../script_help.sh" "$@"
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${RXE_VM_CACHE:-$HOME/.cache/rdmaflow-rxe-vm}
timeout=${RXE_VM_TIMEOUT:-1200}
mem=${RXE_VM_MEM:-3072M}
accel=${RXE_VM_ACCEL:-auto}
ncpu=$(nproc)
smp=$((ncpu < 4 ? ncpu : 4))

fail() { echo "rxe-vm: $*" >&2; exit 125; }
note() { echo "rxe-vm: $*" >&2; }

[ $# -ge 1 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
for tool in qemu-system-x86_64 dpkg-deb cpio gzip xz zstd flock; do
  command -v "$tool" >/dev/null || fail "missing $tool (run tools/setup.sh)"
done
busybox=/bin/busybox
[ -x "$busybox" ] && ! ldd "$busybox" >/dev/null 2>&1 ||
  fail "need a static busybox at /bin/busybox (apt-get install busybox-static)"

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

# --- Kernel: Debian's stock image, unpacked (not installed). ---------------
kroot=$cache/kernel
if [ ! -f "$kroot/.done" ]; then
  pkg=${RXE_VM_KPKG:-$(apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -1)}
  [ -n "$pkg" ] || fail "cannot tell which kernel package to use; set RXE_VM_KPKG"
  note "downloading $pkg"
  (cd "$cache" && apt-get download "$pkg" >/dev/null 2>&1) ||
    fail "apt-get download $pkg failed (needs Debian's archive)"
  deb=$(ls -t "$cache/${pkg}"_*.deb | head -1)
  rm -rf "$kroot" && mkdir -p "$kroot"
  dpkg-deb -x "$deb" "$kroot"
  rm -rf "$kroot/usr" "$kroot/lib/firmware"
  echo "$deb" >"$kroot/.deb"
  touch "$kroot/.done"
fi
vmlinuz=$(ls "$kroot"/boot/vmlinuz-* | head -1)
kver=${vmlinuz##*/vmlinuz-}
moddir=$kroot/lib/modules/$kver

# An uncompressed vmlinux boots through its PVH entry, skipping the
# decompressor (slow under TCG). Found by the compression magic.
vmlinux=$cache/vmlinux-$kver
if [ ! -f "$vmlinux" ]; then
  for magic in '\xfd7zXZ\x00:xz -dc --single-stream' '\x28\xb5\x2f\xfd:zstd -dcq' '\x1f\x8b\x08:gzip -dc'; do
    offset=$(LC_ALL=C grep -aboP "${magic%%:*}" "$vmlinuz" 2>/dev/null | head -1 | cut -d: -f1) || true
    [ -n "$offset" ] || continue
    tail -c +$((offset + 1)) "$vmlinuz" | ${magic#*:} >"$vmlinux.tmp" 2>/dev/null || true
    if [ "$(head -c 4 "$vmlinux.tmp" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; then
      mv "$vmlinux.tmp" "$vmlinux"
      break
    fi
    rm -f "$vmlinux.tmp"
  done
fi
kernel_image=$vmlinuz
[ -f "$vmlinux" ] && kernel_image=$vmlinux

# --- initramfs: static busybox, the modules rxe needs, guest_init.sh. ------
initrd=$cache/initrd-$kver.cpio.gz
modules() {  # the root modules and everything they depend on
  local -A path=() seen=()
  local f n deps reader
  while IFS= read -r f; do
    n=${f##*/}; n=${n%%.ko*}; path[${n//-/_}]=$f
  done < <(cd "$moddir" && find kernel -name '*.ko*')
  local queue=(virtio_pci 9pnet_virtio 9p dummy ib_core ib_uverbs rdma_cm rdma_ucm
               rdma_rxe crc32_generic)
  while [ ${#queue[@]} -gt 0 ]; do
    n=${queue[0]//-/_}; queue=("${queue[@]:1}")
    [ -n "${seen[$n]:-}" ] && continue
    seen[$n]=1
    f=${path[$n]:-}
    [ -n "$f" ] || continue  # built into the kernel
    echo "$f"
    case $f in *.xz) reader="xz -dc";; *.zst) reader="zstd -dcq";; *) reader=cat;; esac
    deps=$($reader "$moddir/$f" | tr '\0' '\n' | sed -n 's/^depends=//p' | head -1)
    [ -n "$deps" ] && queue+=(${deps//,/ })
  done
}
if [ ! -f "$initrd" ] || [ "$here/guest_init.sh" -nt "$initrd" ]; then
  if [ ! -d "$moddir" ]; then
    rm -rf "$kroot/lib" && dpkg-deb -x "$(cat "$kroot/.deb")" "$kroot.tmp" &&
      mv "$kroot.tmp/lib" "$kroot/lib" && rm -rf "$kroot.tmp"
  fi
  note "building the initramfs for $kver"
  root=$cache/initrd-root
  rm -rf "$root" && mkdir -p "$root"/{bin,sbin,dev,proc,sys,host,ctl,lib/modules/$kver}
  cp "$busybox" "$root/bin/busybox"
  ln -s busybox "$root/bin/sh"
  ln -s ../bin/busybox "$root/sbin/modprobe"
  while IFS= read -r f; do
    mkdir -p "$root/lib/modules/$kver/$(dirname "$f")"
    case $f in
      *.xz) xz -dc "$moddir/$f" >"$root/lib/modules/$kver/${f%.xz}";;
      *.zst) zstd -dcq "$moddir/$f" >"$root/lib/modules/$kver/${f%.zst}";;
      *) cp "$moddir/$f" "$root/lib/modules/$kver/$f";;
    esac
  done < <(modules)
  cp "$moddir"/modules.builtin* "$moddir"/modules.order "$root/lib/modules/$kver/" 2>/dev/null || true
  "$busybox" depmod -b "$root" "$kver"
  cp "$here/guest_init.sh" "$root/init" && chmod 755 "$root/init"
  (cd "$root" && find . -print0 | cpio --null -o -H newc -R 0:0 --quiet) | gzip -1 >"$initrd.tmp"
  mv "$initrd.tmp" "$initrd"
  rm -rf "$root" "$kroot/lib"  # the .deb stays cached; modules re-extract if needed
fi
flock -u 9

# --- Run. ------------------------------------------------------------------
if [ "$accel" = auto ]; then
  accel=tcg
  # kvm_pvm (nested "pagetable-based VM") cannot run a stock kernel.
  if [ -w /dev/kvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then
    accel=kvm
  fi
fi
if [ "$accel" = kvm ]; then machine=(-machine pc,accel=kvm -cpu host)
else machine=(-machine pc,accel=tcg -cpu max); fi

run=$(mktemp -d "$cache/run.XXXXXX")
qemu_pid=
cleanup() { [ -n "$qemu_pid" ] && kill "$qemu_pid" 2>/dev/null; rm -rf "$run"; }
trap cleanup EXIT
printf 'RW_DIRS=%q\n' "$PWD" >"$run/env.sh"
printf '%s\n' "$PWD" >"$run/pwd"
if [ $# -eq 1 ]; then printf '%s\n' "$1" >"$run/cmd.sh"
else { printf 'exec'; printf ' %q' "$@"; printf '\n'; } >"$run/cmd.sh"; fi

note "booting $kver ($accel, $smp vCPUs, $mem)"
start=$(date +%s)
qemu-system-x86_64 "${machine[@]}" -smp "$smp" -m "$mem" \
  -nodefaults -no-user-config -display none -no-reboot -serial stdio \
  -kernel "$kernel_image" -initrd "$initrd" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 oops=panic mitigations=off" \
  -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
  -virtfs "local,path=$run,mount_tag=ctl,security_model=none" \
  -virtfs "local,path=$PWD,mount_tag=rw0,security_model=none,multidevs=remap" \
  </dev/null > >(tee "$cache/last-console.log") 2>&1 &
qemu_pid=$!
while kill -0 "$qemu_pid" 2>/dev/null; do
  if [ $(($(date +%s) - start)) -gt "$timeout" ]; then
    note "timeout after ${timeout}s"
    exit 124
  fi
  sleep 0.5
done
wait "$qemu_pid" || true
qemu_pid=
sleep 0.2
[ -f "$run/booted" ] || fail "the guest did not boot; see $cache/last-console.log"
[ -f "$run/rc" ] || fail "the guest stopped without a status; see $cache/last-console.log"
note "VM ran $(($(date +%s) - start))s"
exit "$(cat "$run/rc")"
