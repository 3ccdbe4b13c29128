#!/usr/bin/env bash
# Installs a titan .deb (from `make package`) with apt into a bare Debian 12
# root, which has none of the build dependencies, and trains the debug model
# there from a folder outside any source tree: proof that the package declares
# every runtime dependency and finds its data (share/titan) on its own.
#
#   scripts/dev/deb_install_check.sh build-package/titan_0.1.0_amd64.deb [STEPS]
#
# Run as root. The bare root is the base tarball that ../shared/tools/fresh-machine-check
# caches (/var/tmp/titan-fresh-base.tar; run that once first), unpacked afresh.
set -euo pipefail
deb=$(realpath "$1")
steps=${2:-20}
base=/var/tmp/titan-fresh-base.tar
[ -s "$base" ] || { echo "deb_install_check: $base is missing; run ../shared/tools/fresh-machine-check once" >&2; exit 1; }
root=$(mktemp -d /var/tmp/titan-deb-check.XXXXXX)
mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
  rm -rf "$root"
}
trap cleanup EXIT
tar -C "$root" -xf "$base"
for dir in /proc /dev /sys; do mount --rbind "$dir" "$root$dir"; mounted+=("$root$dir"); done
mount --bind /etc/apt "$root/etc/apt" && mounted+=("$root/etc/apt") && mount -o remount,bind,ro "$root/etc/apt"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
[ -d /usr/local/share/ca-certificates ] && cp -a /usr/local/share/ca-certificates "$root/usr/local/share/"
cp -a /etc/ssl/certs "$root/etc/ssl/" 2>/dev/null || true
cp "$deb" "$root/tmp/"

chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 bash -euo pipefail -c "
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq /tmp/$(basename "$deb") >/tmp/apt.log 2>&1 || { tail -20 /tmp/apt.log; exit 1; }
  echo \"deb_install_check: installed \$(dpkg-query -W -f='\${Package} \${Version}' titan); depends: \$(dpkg-query -W -f='\${Depends}' titan)\"
  command -v cmake g++ >/dev/null && { echo 'deb_install_check: a compiler is present; this root is not bare'; exit 1; }
  mkdir -p /home/user/job && cd /home/user/job
  titan data prepare --train-tokenizer 2048 --output data/fortunes
  echo 'built-in tokenizers found' | titan tokenizer encode --tokenizer cl100k_base
  titan train --config /usr/share/titan/configs/llama3_debug.toml --training.steps $steps --validation.freq 10 \
    --checkpoint.interval 10 --metrics.log_freq 5
  ls outputs/llama3_debug/checkpoint
  # What an AVX2-only CPU runs (kernels and oneDNN capped), bf16 included.
  TITAN_CPU_ISA=avx2 titan train --config /usr/share/titan/configs/llama3_debug.toml --training.steps 3 \
    --job.dump_folder outputs/avx2 --validation.enable false
"
echo "deb_install_check: ok"
