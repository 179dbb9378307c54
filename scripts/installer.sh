# Sourced by scripts/setup.sh, setup_labelstudio.sh and setup_lmeval.sh: `installer VENV CONSTRAINTS` defines
# `install ARGS...`, which installs into VENV through uv with CONSTRAINTS (the versions a fresh pip set-up
# resolved: uv alone resolves some packages otherwise), and through pip with them where uv fails to install or
# PIQAFORGE_INSTALLER=pip. uv itself comes from PyPI through pip, into VENV.
installer() {
  local venv=$1
  INSTALL_CONSTRAINTS=$2
  PIP=("$venv/bin/python" -m pip install --disable-pip-version-check -q)
  "${PIP[@]}" --upgrade pip wheel setuptools
  UV=()
  if [[ "${PIQAFORGE_INSTALLER:-uv}" == uv ]] && "${PIP[@]}" uv >/dev/null 2>&1; then
    UV=("$venv/bin/uv" pip install -q --python "$venv/bin/python")
  fi
}
install() {
  if [[ ${#UV[@]} -gt 0 ]] && "${UV[@]}" -c "$INSTALL_CONSTRAINTS" "$@"; then return 0; fi
  "${PIP[@]}" -c "$INSTALL_CONSTRAINTS" "$@"
}
