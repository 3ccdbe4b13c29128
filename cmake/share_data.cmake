# share/titan: the files the titan binary reads at run time, found relative to
# the binary (src/titan/core/share_dir.cpp) in the build tree and once
# installed alike: the built-in tokenizers (copied from the npm packages that
# scripts/setup.sh installs), the benchmark peers and the example job configs.
set(TITAN_SHARE_DIR ${CMAKE_BINARY_DIR}/share/titan)
set(titan_share_outputs "")

# titan_share_file(SOURCE DEST): copy SOURCE to share/titan/DEST whenever it changes.
function(titan_share_file source dest)
  get_filename_component(folder ${TITAN_SHARE_DIR}/${dest} DIRECTORY)
  add_custom_command(OUTPUT ${TITAN_SHARE_DIR}/${dest}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${folder}
    COMMAND ${CMAKE_COMMAND} -E copy ${source} ${TITAN_SHARE_DIR}/${dest}
    DEPENDS ${source} VERBATIM)
  set(titan_share_outputs ${titan_share_outputs} ${TITAN_SHARE_DIR}/${dest} PARENT_SCOPE)
endfunction()

set(npm ${PROJECT_SOURCE_DIR}/tests/peers/node_modules)
set(tiktoken_encodings cl100k_base o200k_base p50k_base r50k_base)
set(llama3_data ${npm}/llama3-tokenizer-js/src/data-converted.js)
set(tokenizers_found ON)
foreach(encoding ${tiktoken_encodings})
  if(EXISTS ${npm}/tiktoken/encoders/${encoding}.json)
    titan_share_file(${npm}/tiktoken/encoders/${encoding}.json tokenizers/${encoding}.json)
  else()
    set(tokenizers_found OFF)
  endif()
endforeach()
if(EXISTS ${llama3_data})
  titan_share_file(${llama3_data} tokenizers/llama3.js)
else()
  set(tokenizers_found OFF)
endif()
if(NOT tokenizers_found)
  message(WARNING "titan: the npm tokenizer packages are not in tests/peers/node_modules, so the built-in "
    "tokenizers (cl100k_base, llama3, ...) will be missing; run scripts/setup.sh and reconfigure")
endif()

foreach(peer train_peer.py families_peer.py moe_peer.py gpu_train_peer.py flux_peer.py float8_peer.py tokenizer_peer.cjs)
  titan_share_file(${PROJECT_SOURCE_DIR}/bench/${peer} bench/${peer})
endforeach()
# tests/reference's plain-PyTorch models the families peer trains for the
# families its own decoder cannot express (bench/families_bench.cpp).
foreach(module deepseek_v3.py gpt_oss.py qwen3_5.py model.py functional.py rope_scaling.py)
  titan_share_file(${PROJECT_SOURCE_DIR}/tests/reference/${module} bench/reference/${module})
endforeach()
# The example configs (module "titan") and the registry's modules in subfolders (configs/llama3/...).
file(GLOB_RECURSE titan_configs CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}/configs
  ${PROJECT_SOURCE_DIR}/configs/*.toml)
foreach(config ${titan_configs})
  titan_share_file(${PROJECT_SOURCE_DIR}/configs/${config} configs/${config})
endforeach()

add_custom_target(titan_share_data ALL DEPENDS ${titan_share_outputs})
install(DIRECTORY ${TITAN_SHARE_DIR} DESTINATION share)
add_dependencies(titan_cli titan_share_data)
