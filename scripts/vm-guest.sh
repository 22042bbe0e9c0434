#!/usr/bin/env bash
# Builds the tiny guest of the persistent-VM tests and benchmarks: Debian's stock kernel and
# a busybox-static initramfs whose /init prints, on the serial console, a boot id (random at
# each boot) and a counter kept in guest memory, and checks a 4 MiB block of guest memory
# against the checksum it took at boot.
#
#   scripts/vm-guest.sh [OUT]      OUT defaults to target/vm-guest
#
# Output: OUT/vmlinuz, OUT/initrd.gz. The result is cached: a second run with the same
# script and kernel package does nothing (the kernel package itself is kept in OUT/deb).
# Needs: apt-get (Debian; the kernel comes from its registry), busybox-static, cpio, gzip.
#
# The guest's serial lines (what tests parse):
#   MNEMO-GUEST boot=<8 hex> start          once per boot, before the counter starts
#   MNEMO-GUEST boot=<8 hex> count=<n> mem=<ok|CORRUPT> up=<seconds>   every 0.25 s
#   MNEMO-GUEST boot=<8 hex> nvdimm previous=[<marker>]   with mnemo.nvdimm on the kernel
#   MNEMO-GUEST boot=<8 hex> nvdimm written               command line: the NVDIMM's marker
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
# OUT is relative to the caller's directory; the default is under the repository.
out=${1:-$(dirname "$self")/../target/vm-guest}
mkdir -p "$out/deb"
out=$(cd "$out" && pwd)
cd "$(dirname "$self")/.."

# The /init of the guest. Its counter is a shell variable: it lives only in guest RAM, so a
# guest that continues after a power cycle (rather than rebooting) goes on from where it was.
read -r -d '' init <<'INIT' || true
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
boot=$(cut -c1-8 /proc/sys/kernel/random/uuid)
# 4 MiB of random bytes in the initramfs (guest RAM), checksummed once now.
dd if=/dev/urandom of=/block bs=64k count=64 2>/dev/null
sum=$(md5sum /block | cut -d' ' -f1)
echo "MNEMO-GUEST boot=$boot start"
# With "mnemo.nvdimm" on the kernel command line: the guest-visible persistent memory (an
# emulated NVDIMM, /dev/pmem0). Print the marker the previous boot left there, then leave one.
if grep -q mnemo.nvdimm /proc/cmdline; then
    for m in libnvdimm nd_btt nfit nd_pmem; do insmod /lib/modules/$m.ko 2>/dev/null; done
    i=0
    while [ ! -b /dev/pmem0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    if [ -b /dev/pmem0 ]; then
        previous=$(dd if=/dev/pmem0 bs=64 count=1 2>/dev/null | tr -d '\000\n')
        echo "MNEMO-GUEST boot=$boot nvdimm previous=[$previous]"
        printf 'marker-of-boot-%s' "$boot" | dd of=/dev/pmem0 bs=64 count=1 conv=sync,notrunc 2>/dev/null
        sync
        echo "MNEMO-GUEST boot=$boot nvdimm written"
    else
        echo "MNEMO-GUEST boot=$boot nvdimm missing"
    fi
fi
count=0
while :; do
    count=$((count + 1))
    mem=ok
    if [ $((count % 8)) = 0 ] && [ "$(md5sum /block | cut -d' ' -f1)" != "$sum" ]; then
        mem=CORRUPT
    fi
    echo "MNEMO-GUEST boot=$boot count=$count mem=$mem up=$(cut -d' ' -f1 /proc/uptime)"
    sleep 0.25
done
INIT

command -v busybox >/dev/null && [ -f /bin/busybox ] || {
    echo "vm-guest.sh: /bin/busybox is missing (apt-get install busybox-static)" >&2
    exit 1
}
case "$(ldd /bin/busybox 2>&1 || true)" in
    *"not a dynamic"* | *"statically linked"*) ;;
    *) echo "vm-guest.sh: /bin/busybox is not static (apt-get install busybox-static)" >&2; exit 1 ;;
esac
command -v cpio >/dev/null || { echo "vm-guest.sh: cpio is missing (apt-get install cpio)" >&2; exit 1; }

# The kernel package: the one linux-image-amd64 depends on today, downloaded once.
deb=$(ls "$out"/deb/linux-image-*.deb 2>/dev/null | head -1 || true)
if [ -z "$deb" ]; then
    kernel_package() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }'; }
    package=$(kernel_package)
    if [ -z "$package" ] && [ "$(id -u)" = 0 ]; then
        apt-get update -qq && package=$(kernel_package)
    fi
    [ -n "$package" ] || { echo "vm-guest.sh: no kernel package (run apt-get update)" >&2; exit 1; }
    (cd "$out/deb" && timeout 600 apt-get download -q "$package")
    deb=$(ls "$out"/deb/linux-image-*.deb | head -1)
fi

stamp=$( { sha256sum "$self"; basename "$deb"; sha256sum /bin/busybox; } | sha256sum | cut -c1-16)
if [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.gz" ] && [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ]; then
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dpkg -x "$deb" "$work/kernel"
cp "$work"/kernel/boot/vmlinuz-* "$work/vmlinuz"

root="$work/root"
mkdir -p "$root"/{bin,dev,proc,sys,tmp,lib/modules}
cp /bin/busybox "$root/bin/busybox"
# The NVDIMM drivers (modules in Debian's kernel), loaded in this order by /init.
kver=$(ls "$work/kernel/lib/modules")
for m in drivers/nvdimm/libnvdimm drivers/nvdimm/nd_btt drivers/acpi/nfit/nfit drivers/nvdimm/nd_pmem; do
    f="$work/kernel/lib/modules/$kver/kernel/$m.ko"
    if [ -f "$f" ]; then
        cp "$f" "$root/lib/modules/"
    elif [ -f "$f.xz" ]; then
        xz -dc "$f.xz" > "$root/lib/modules/$(basename "$m").ko"
    else
        echo "vm-guest.sh: $m.ko is not in $(basename "$deb")" >&2
        exit 1
    fi
done
printf '%s\n' "$init" > "$root/init"
chmod 755 "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initrd.gz"

mv "$work/vmlinuz" "$out/vmlinuz"
mv "$work/initrd.gz" "$out/initrd.gz"
echo "$stamp" > "$out/stamp"
echo "vm-guest.sh: $out/vmlinuz ($(basename "$deb")), $out/initrd.gz"
