export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
W22="wan2.2 --op decode --frames 121 --size 704x1280"
W21="wan2.1 --op decode --frames 81 --size 720x1280"
export BUDGET_LIST="$W22|--max-memory 4G;$W22|--max-memory 4G VAE_EXEC_STRIP_NORM=0;$W21|--max-memory 3G"
bash bench/gpu_check.sh build-gpu-shared --deps build-gpu-deps --no-ops --no-fixtures --budget --runs 3 > $OUT/check.out 2>&1
echo "rc $?"
cat $OUT/summary.txt | cut -c1-700
