# cuda_archs.cmake -- whether the CUDA backend is built, and for which GPUs: decided once, at
# configure time. Included from CMakeLists.txt before its CUDA block.
#
# VAE_CUDA=AUTO builds CUDA only where nvcc is found AND a GPU is visible (nvidia-smi), and then for
# that GPU's architecture alone: nvcc compiling every architecture for a machine with no GPU is what
# made a first build take most of an hour on a small box, while the CPU backend builds in under a
# minute. VAE_CUDA=ON without CMAKE_CUDA_ARCHITECTURES builds for the visible GPUs, or, where none
# is visible, for the release list below; CMAKE_CUDA_ARCHITECTURES=release names that list wherever
# the build runs (scripts/wheel.sh). Sets VAE_CUDA to ON or OFF and, when ON,
# CMAKE_CUDA_ARCHITECTURES; VAE_CUDA_WHY says why (printed by the caller).

# Ampere (A100; RTX 30), Ada (RTX 40, L4), Hopper (H100/H200; sm_90a kernels are added by
# cutlass.cmake), Blackwell (B200; RTX 50) as machine code, and PTX of the last for later GPUs.
set(VAE_CUDA_RELEASE_ARCHS "80-real;86-real;89-real;90-real;100-real;120"
    CACHE STRING "CUDA architectures of release builds (VAE_CUDA=ON with no GPU visible)")

# The compute capabilities of the GPUs nvidia-smi sees, as CMake architectures ("9.0" -> "90"),
# each once; empty when there is no nvidia-smi, no driver or no GPU.
function(vae_visible_gpu_archs out)
  set(archs "")
  find_program(VAE_NVIDIA_SMI nvidia-smi)
  if(VAE_NVIDIA_SMI)
    execute_process(COMMAND ${VAE_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE caps RESULT_VARIABLE rc ERROR_QUIET TIMEOUT 20)
    if(rc EQUAL 0)
      string(REGEX MATCHALL "[0-9]+\\.[0-9]+" caps "${caps}")
      foreach(cap IN LISTS caps)
        string(REPLACE "." "" arch "${cap}")
        list(APPEND archs ${arch})
      endforeach()
      list(REMOVE_DUPLICATES archs)
    endif()
  endif()
  set(${out} "${archs}" PARENT_SCOPE)
endfunction()

if(NOT VAE_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  vae_visible_gpu_archs(VAE_GPU_ARCHS)
  if(VAE_CUDA STREQUAL "AUTO")
    if(NOT CMAKE_CUDA_COMPILER)
      set(VAE_CUDA OFF)
      set(VAE_CUDA_WHY "no nvcc found")
    elseif(NOT VAE_GPU_ARCHS AND NOT CMAKE_CUDA_ARCHITECTURES)
      set(VAE_CUDA OFF)
      set(VAE_CUDA_WHY "nvcc found but no GPU visible; -DVAE_CUDA=ON builds it for every release architecture")
    else()
      set(VAE_CUDA ON)
    endif()
  endif()
  if(VAE_CUDA AND NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "VAE_CUDA=ON but no CUDA compiler (nvcc) was found: install the CUDA "
                        "toolkit or put its bin/ on PATH, or build with -DVAE_CUDA=OFF")
  endif()
  if(VAE_CUDA AND CMAKE_CUDA_ARCHITECTURES STREQUAL "release")
    set(CMAKE_CUDA_ARCHITECTURES ${VAE_CUDA_RELEASE_ARCHS})
    set(VAE_CUDA_WHY "the release architectures")
  elseif(VAE_CUDA AND NOT CMAKE_CUDA_ARCHITECTURES)
    if(VAE_GPU_ARCHS)
      set(CMAKE_CUDA_ARCHITECTURES ${VAE_GPU_ARCHS})
      set(VAE_CUDA_WHY "for the visible GPUs")
    else()
      set(CMAKE_CUDA_ARCHITECTURES ${VAE_CUDA_RELEASE_ARCHS})
      set(VAE_CUDA_WHY "no GPU visible: the release architectures")
    endif()
  elseif(VAE_CUDA)
    set(VAE_CUDA_WHY "CMAKE_CUDA_ARCHITECTURES as given")
  endif()
else()
  set(VAE_CUDA_WHY "VAE_CUDA=OFF")
endif()
