#!/bin/bash
# SPDX-License-Identifier: MIT
# What the local disk gives with readers and writers of every kind: one dd,
# direct I/O at several queue depths, buffered readers, one WILLNEED of the
# whole file. A one-off probe behind
# docs/BENCHMARKS.md ("Where the restore's time goes"); needs 16 GiB free
# under /var/tmp:  bash disk.sh
W=/var/tmp/probe; mkdir -p $W; f=$W/f; G=8
now() { date +%s%N; }
rate() { awk -v b=$1 -v ns=$2 'BEGIN { printf "%.2f GB/s", b / ns }'; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
B=$((G << 30))
lsblk -o NAME,SIZE,ROTA,SCHED,RQ-SIZE,RA,TYPE,MOUNTPOINT
df -h /var/tmp; nproc; free -g
for d in /sys/block/*; do echo "$d ra=$(cat $d/queue/read_ahead_kb) nr=$(cat $d/queue/nr_requests) maxkb=$(cat $d/queue/max_sectors_kb) hw=$(cat $d/queue/max_hw_sectors_kb) sched=$(cat $d/queue/scheduler) mq=$(ls $d/mq 2>/dev/null | wc -l)"; done
t=$(now); dd if=/dev/zero of=$f bs=1M count=$((G*1024)) conv=fsync status=none; echo "write 1 buffered: $(rate $B $(($(now)-t)))"
rm -f $W/g; t=$(now); ps=""
for i in 0 1 2 3 4 5 6 7; do dd if=/dev/zero of=$W/g bs=4M seek=$((i*256*G/8*1)) count=$((256*G/8)) oflag=direct conv=notrunc status=none & ps="$ps $!"; done
for p in $ps; do wait $p; done; sync; echo "write 8 direct 4M: $(rate $B $(($(now)-t)))"
rm -f $W/g
rd() { # name streams bs flags
	local n=$2 bs=$3 fl=$4 per=$((B / $2)) ps="" t
	drop; t=$(now)
	for ((i = 0; i < n; i++)); do dd if=$f of=/dev/null bs=$bs iflag=skip_bytes,count_bytes$fl skip=$((i * per)) count=$per status=none & ps="$ps $!"; done
	for p in $ps; do wait $p; done
	echo "read $1: $(rate $B $(($(now)-t)))"
}
rd "1 buffered 1M" 1 1M ""
rd "1 direct 16M" 1 16M ",direct"
rd "4 direct 4M" 4 4M ",direct"
rd "8 direct 4M" 8 4M ",direct"
rd "16 direct 2M" 16 2M ",direct"
rd "32 direct 1M" 32 1M ",direct"
rd "8 buffered 1M" 8 1M ""
drop; t=$(now); python3 - <<PY
import os
fd=os.open("$f",os.O_RDONLY); n=$B; step=64<<20
for off in range(0,n,step): os.posix_fadvise(fd,off,step,os.POSIX_FADV_WILLNEED)
PY
echo "fadvise WILLNEED whole (submit): $(rate $B $(($(now)-t)))"
t2=$(now); dd if=$f of=/dev/null bs=1M status=none; echo "then read: total $(rate $B $(($(now)-t)))"
rm -rf $W
