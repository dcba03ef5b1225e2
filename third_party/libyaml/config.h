/* config.h — what libyaml's configure script would write (src/yaml_private.h includes it under
 * HAVE_CONFIG_H): the version of the vendored sources, 0.2.5. */
#define YAML_VERSION_MAJOR 0
#define YAML_VERSION_MINOR 2
#define YAML_VERSION_PATCH 5
#define YAML_VERSION_STRING "0.2.5"
