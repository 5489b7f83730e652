/* Diagnostics to stderr. FERROX_LOG=error|warn|info|debug sets how much is printed (default
 * warn). Library code logs only what a user should see; failures are returned as errors. */
#ifndef FX_CORE_LOG_H
#define FX_CORE_LOG_H

enum fx_log_level { FX_LOG_ERROR, FX_LOG_WARN, FX_LOG_INFO, FX_LOG_DEBUG };

void fx_log(enum fx_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int fx_log_enabled(enum fx_log_level level);

#define FX_WARN(...)  fx_log(FX_LOG_WARN, __VA_ARGS__)
#define FX_INFO(...)  fx_log(FX_LOG_INFO, __VA_ARGS__)
#define FX_DEBUG(...) fx_log(FX_LOG_DEBUG, __VA_ARGS__)

#endif
