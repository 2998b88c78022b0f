export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bash bench/gpu_check.sh build-gpu-shared --deps build-gpu-deps --tiles > $OUT/check.out 2>&1
echo "rc $?"
tail -60 $OUT/summary.txt
grep -E "FAIL|rms_norm rows" $OUT/test_cuda_ops.log | head -20
