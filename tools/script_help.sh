# Sourced by the scripts of tools/ as their first command:
#   source "$(dirname "$0")/script_help.sh" "$@"
# When the script's first argument is -h or --help, prints the script's
# header comment (the lines after "#!", up to the first line of code: what it
# does, its arguments and its environment knobs) and exits 0, before the
# script installs, builds or runs anything.
case "${1:-}" in
  -h|--help)
    sed -n '2,/^[^#]/ { /^#/ s/^# \{0,1\}//p }' "$0"
    exit 0
    ;;
esac
