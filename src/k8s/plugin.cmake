# The kubelet's gRPC APIs: the device plugin's v1beta1 API and the PodResources v1 API generated
# from proto/ at build time (gpufrac_k8s_deviceplugin_api, gpufrac_k8s_podresources_api, also used
# by the tests' fake kubelet), the device-plugin server that speaks the first (gpufrac_k8s_plugin)
# and the PodResources client (gpufrac_k8s_pod_resources); their public headers carry no gRPC or
# protobuf types.
find_package(Protobuf REQUIRED)
# Debian's libgrpc++-dev ships a CMake config; pkg-config is the fallback for installs without one.
find_package(gRPC CONFIG QUIET)
if(gRPC_FOUND)
  set(GPUFRAC_GRPCPP gRPC::grpc++)
else()
  pkg_check_modules(GRPCPP REQUIRED IMPORTED_TARGET grpc++)
  set(GPUFRAC_GRPCPP PkgConfig::GRPCPP)
endif()
find_program(GPUFRAC_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

# Each kubelet API is generated from proto/<name>.proto under the build tree as
# k8s/proto/<name>.pb.{h,cc} (so sources include them by that path) into a library of its own.
set(_kubelet_proto_dir ${CMAKE_CURRENT_SOURCE_DIR}/proto)
set(_kubelet_gen_root ${CMAKE_CURRENT_BINARY_DIR}/generated)
function(gpufrac_kubelet_api target name what)
  set(gen_dir ${_kubelet_gen_root}/k8s/proto)
  set(base ${gen_dir}/${name})
  add_custom_command(
    OUTPUT ${base}.pb.h ${base}.pb.cc ${base}.grpc.pb.h ${base}.grpc.pb.cc
    COMMAND ${CMAKE_COMMAND} -E make_directory ${gen_dir}
    COMMAND protobuf::protoc
            --proto_path=${_kubelet_proto_dir}
            --cpp_out=${gen_dir}
            --grpc_out=${gen_dir}
            --plugin=protoc-gen-grpc=${GPUFRAC_GRPC_CPP_PLUGIN}
            ${_kubelet_proto_dir}/${name}.proto
    DEPENDS ${_kubelet_proto_dir}/${name}.proto protobuf::protoc
    COMMENT "Generating ${what}"
    VERBATIM)
  add_library(${target} STATIC ${base}.pb.cc ${base}.grpc.pb.cc)
  target_include_directories(${target} SYSTEM PUBLIC ${_kubelet_gen_root})
  target_link_libraries(${target} PUBLIC ${GPUFRAC_GRPCPP} protobuf::libprotobuf)
  # Generated code is not ours to keep warning-free.
  target_compile_options(${target} PRIVATE -w)
endfunction()

gpufrac_kubelet_api(gpufrac_k8s_deviceplugin_api deviceplugin_v1beta1
                    "the kubelet device-plugin API (v1beta1)")
gpufrac_kubelet_api(gpufrac_k8s_podresources_api podresources_v1
                    "the kubelet PodResources API (v1)")

add_library(gpufrac_k8s_plugin STATIC device_plugin.cc)
target_link_libraries(gpufrac_k8s_plugin
                      PUBLIC gpufrac_common Threads::Threads
                      PRIVATE gpufrac_k8s_deviceplugin_api)

# The kubelet's PodResources API as a client (List), also without gRPC in its header.
add_library(gpufrac_k8s_pod_resources STATIC pod_resources.cc)
target_link_libraries(gpufrac_k8s_pod_resources
                      PUBLIC gpufrac_common
                      PRIVATE gpufrac_k8s_podresources_api)
