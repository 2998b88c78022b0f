export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
W22="wan2.2 --op decode --frames 121 --size 704x1280"
W21="wan2.1 --op decode --frames 81 --size 720x1280"
export BUDGET_LIST="$W22|--max-memory 4G;$W21|--max-memory 3G"
bash bench/gpu_check.sh build-gpu-shared --deps build-gpu-deps --tiles --budget --runs 3 > $OUT/check.out 2>&1
echo "rc $?"
grep -E "^(FAIL|ERROR)|test_cuda_ops:|budget \[" $OUT/summary.txt | cut -c1-420
grep -c "^PASS" $OUT/summary.txt
grep -E "bus: " $OUT/test_cuda_ops.log | head -8
grep -o "host copies: [^;]*" $OUT/bench.log | head -4
