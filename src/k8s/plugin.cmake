# The kubelet device plugin's gRPC layer: the v1beta1 API generated from proto/ at build time
# (gpufrac_k8s_deviceplugin_api, also used by the tests' fake kubelet) and the server that speaks it
# (gpufrac_k8s_plugin, whose public headers carry no gRPC or protobuf types).
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

# Generated under the build tree as k8s/proto/*.pb.{h,cc}, so sources include them by that path.
set(_dp_proto_dir ${CMAKE_CURRENT_SOURCE_DIR}/proto)
set(_dp_gen_root ${CMAKE_CURRENT_BINARY_DIR}/generated)
set(_dp_gen_dir ${_dp_gen_root}/k8s/proto)
set(_dp_base ${_dp_gen_dir}/deviceplugin_v1beta1)
add_custom_command(
  OUTPUT ${_dp_base}.pb.h ${_dp_base}.pb.cc ${_dp_base}.grpc.pb.h ${_dp_base}.grpc.pb.cc
  COMMAND ${CMAKE_COMMAND} -E make_directory ${_dp_gen_dir}
  COMMAND protobuf::protoc
          --proto_path=${_dp_proto_dir}
          --cpp_out=${_dp_gen_dir}
          --grpc_out=${_dp_gen_dir}
          --plugin=protoc-gen-grpc=${GPUFRAC_GRPC_CPP_PLUGIN}
          ${_dp_proto_dir}/deviceplugin_v1beta1.proto
  DEPENDS ${_dp_proto_dir}/deviceplugin_v1beta1.proto protobuf::protoc
  COMMENT "Generating the kubelet device-plugin API (v1beta1)"
  VERBATIM)

add_library(gpufrac_k8s_deviceplugin_api STATIC
            ${_dp_base}.pb.cc ${_dp_base}.grpc.pb.cc)
target_include_directories(gpufrac_k8s_deviceplugin_api SYSTEM PUBLIC ${_dp_gen_root})
target_link_libraries(gpufrac_k8s_deviceplugin_api PUBLIC ${GPUFRAC_GRPCPP} protobuf::libprotobuf)
# Generated code is not ours to keep warning-free.
target_compile_options(gpufrac_k8s_deviceplugin_api PRIVATE -w)

add_library(gpufrac_k8s_plugin STATIC device_plugin.cc)
target_link_libraries(gpufrac_k8s_plugin
                      PUBLIC gpufrac_common Threads::Threads
                      PRIVATE gpufrac_k8s_deviceplugin_api)
