# Warnings are errors for our own code (targets made through dsv4_module / dsv4_executable).
set(DSV4_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align
    -Wunused -Woverloaded-virtual -Wimplicit-fallthrough -Werror)
set(DSV4_CUDA_WARNINGS -Xcompiler=-Wall,-Wextra -Werror=all-warnings)

if(DSV4_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
