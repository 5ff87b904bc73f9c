"""The README's commands and program: demo.sh, deps.sh, hello.c."""
