#!/usr/bin/env bash
# Interleaved data-path runs for the socket channel (26 Nov): 3 rounds of each configuration, one after another.
set -u
out=${1:-benchmarks/results/datapath_socket}
for rep in 1 2 3; do
  for spec in "netns socket fp32" "netns socket bf16" "netns grpc fp32" "netns grpc bf16" "local shm fp32"; do
    set -- $spec
    flags="--workers 4 --ps 2 --bytes 16MiB --transport $2 --wire $3"
    [ "$1" = netns ] && flags="$flags --netns"
    name="$1_$2_$3_rep$rep"
    python -m benchmarks.datapath $flags > "$out/$name.json" 2> "$out/$name.log"
    echo "$name rc=$? $(tail -1 "$out/$name.json")"
  done
done
