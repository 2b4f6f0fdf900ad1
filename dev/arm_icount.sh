#!/usr/bin/env bash
# Guest instructions of the SSD forward + backward on AArch64, counted under qemu user-mode
# emulation (Debian's qemu-user-static has no TCG plugins): every translated block's size from
# `-d in_asm`, every execution of one from `-d exec,nochain`, summed on the fly. One demo run
# with --reps 2 minus one with --reps 1 is one forward + backward of the optimized backend
# (setup, warm-up and the reference slice cancel). Usage, after `make test-arm`:
#   dev/arm_icount.sh [B,L,H,P,N,Q,G]        (NEON, then MAMBA2C_ISA=scalar)
set -eu # (no pipefail: the count is the awk at the end of each pipeline)
cd "$(dirname "$0")/../build-arm"
shape=${1:-1,128,2,64,64,64,1}
count() {
    MAMBA2C_ISA=$1 qemu-aarch64-static -L /usr/aarch64-linux-gnu -d in_asm,exec,nochain \
        ./examples/mamba2c-demo --shape "$shape" --threads 1 --reps "$2" 2>&1 >/dev/null | awk '
        /^IN:/ { inblk = 1; pc = ""; n = 0; next }
        inblk && /^0x[0-9a-f]+:/ { if (pc == "") { pc = substr($1, 3, length($1) - 3); sub(/^0+/, "", pc) } n++; next }
        inblk && /^$/ { if (pc != "") sz[pc] = n; inblk = 0; next }
        /^Trace / { split($4, a, "/"); p = a[2]; sub(/^0+/, "", p); tot += sz[p] }
        END { printf "%.0f\n", tot }'
}
IFS=, read -r B L H P N Q G <<< "$shape"
for isa in neon scalar; do
    cap=; [ "$isa" = scalar ] && cap=scalar
    a=$(count "$cap" 1); b=$(count "$cap" 2)
    awk -v isa="$isa" -v d=$((b - a)) -v t=$((B * L)) -v u=$((B * L * H * P * N)) 'BEGIN {
        printf "%-6s fwd+bwd %d instructions: %.0f per token, %.2f per state element per token\n",
               isa, d, d / t, d / u }'
done
