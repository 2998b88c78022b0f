# cutlass.cmake -- the implicit-GEMM conv kernels on Hopper (src/backends/cuda/kernels/cutlass/, and
# the own sm_90a kernels of src/backends/cuda/kernels/sm90/ beside them), built with CUTLASS's
# headers when they are found and sm_90 is among the CUDA architectures. Included
# from CMakeLists.txt inside the CUDA block; sets VAE_EXTRA_OBJECTS and VAE_HAVE_CUTLASS on vae_obj.
#
# CUTLASS is header-only: -DCUTLASS_DIR=<a CUTLASS checkout or the wheel's source/ folder>, else the
# nvidia-cutlass wheel of the Python found here (scripts/deps.sh installs it; pyproject.toml lists
# it for pip builds). The kernels are compiled for sm_90a alone (wgmma, TMA im2col), one
# translation unit per filter tile so that they build in parallel.
set(CUTLASS_DIR "" CACHE PATH "CUTLASS headers: folder with include/ and tools/util/include/")
option(VAE_CUTLASS "Build the CUTLASS conv kernels for sm_90 when CUTLASS is found" ON)
set(VAE_EXTRA_OBJECTS "")
string(REGEX MATCH "(^|;)90(a|-real|-virtual|a-real)?(;|$)" VAE_HAS_SM90 "${CMAKE_CUDA_ARCHITECTURES}")
if(NOT VAE_CUTLASS OR NOT VAE_HAS_SM90)
  message(STATUS "vae: CUTLASS conv kernels OFF (VAE_CUTLASS=${VAE_CUTLASS}, needs 90 in the CUDA architectures)")
  return()
endif()
if(NOT CUTLASS_DIR)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    # find_spec does not import the package (its __init__ needs more than the headers)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c
              "import importlib.util as u, os; s = u.find_spec('cutlass_library'); print(os.path.join(list(s.submodule_search_locations)[0], 'source') if s else '')"
      OUTPUT_VARIABLE VAE_CUTLASS_WHEEL OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    set(CUTLASS_DIR "${VAE_CUTLASS_WHEEL}")
  endif()
endif()
if(NOT CUTLASS_DIR OR NOT EXISTS "${CUTLASS_DIR}/include/cutlass/conv/collective/collective_builder.hpp")
  message(STATUS "vae: CUTLASS conv kernels OFF (no CUTLASS headers: pip install nvidia-cutlass, or -DCUTLASS_DIR=...)")
  return()
endif()
file(GLOB VAE_IGEMM_SRC ${CMAKE_CURRENT_SOURCE_DIR}/src/backends/cuda/kernels/cutlass/*.cu
     ${CMAKE_CURRENT_SOURCE_DIR}/src/backends/cuda/kernels/sm90/*.cu)
add_library(vae_igemm OBJECT ${VAE_IGEMM_SRC})
set_target_properties(vae_igemm PROPERTIES CUDA_ARCHITECTURES OFF POSITION_INDEPENDENT_CODE ON
                                           CUDA_VISIBILITY_PRESET hidden CUDA_STANDARD 17)
# -w: CUTLASS's templates under the project's -Wall -Wextra; -DNDEBUG: asserts in device code
# would split the wgmma pipeline (ptxas C7510)
target_compile_options(vae_igemm PRIVATE -gencode=arch=compute_90a,code=sm_90a
                                         --expt-relaxed-constexpr -DNDEBUG -w)
target_include_directories(vae_igemm PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src
                                             ${CUTLASS_DIR}/include ${CUTLASS_DIR}/tools/util/include)
target_compile_definitions(vae_obj PRIVATE VAE_HAVE_CUTLASS=1)
set(VAE_EXTRA_OBJECTS $<TARGET_OBJECTS:vae_igemm>)
message(STATUS "vae: CUTLASS conv kernels ON (sm_90a; ${CUTLASS_DIR})")
