/* curl_static: what Debian's static libcurl (libcurl4-openssl-dev's libcurl.a) links against and
 * this program never uses, replaced at link time (meson option curl_link=static, the default).
 *
 * Debian builds one libcurl with every protocol and authentication scheme: SCP/SFTP (libssh2),
 * RTMP (librtmp, itself on GnuTLS), LDAP (OpenLDAP, SASL) and SPNEGO/Kerberos (GSS-API). Linked
 * statically, curl's protocol table pulls all of them in, and some cannot be linked statically at
 * all (Debian ships no libgssapi_krb5.a; libsasl2.a needs Berkeley DB, PostgreSQL and MySQL).
 * Loaded, they cost memory for nothing: libssh2 initialises libcrypto, librtmp pulls GnuTLS with
 * its constructor and p11-kit (bench/README.md, "Footprint", has the measurements).
 *
 * kube_client restricts every transfer to http and https (CURLOPT_PROTOCOLS_STR) and never asks
 * for Negotiate authentication, so none of these functions can be reached. Each one here aborts
 * with its name rather than pretend to succeed; only what curl calls unconditionally answers:
 * libssh2_init (curl_global_init), libssh2_exit (curl_global_cleanup) and libssh2_version
 * (curl_version). The signatures are not the real ones; no header declaring them is included.
 *
 * Any thread (nothing here has state).
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void unused(const char *name)
{
    char msg[256];
    int n = snprintf(msg, sizeof(msg),
                     "hostpath-provisioner: libcurl called %s(), which this build does not link "
                     "(only http and https are; see src/curl_static.c)\n",
                     name);
    if (n > 0)
        (void)!write(2, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
    abort();
}

int libssh2_init(int flags);
int libssh2_init(int flags)
{
    (void)flags;
    return 0;
}

void libssh2_exit(void);
void libssh2_exit(void)
{
}

const char *libssh2_version(int required);
const char *libssh2_version(int required)
{
    (void)required;
    return "none";
}

/* gss_OID GSS_C_NT_HOSTBASED_SERVICE: read only when building a SPNEGO/Kerberos name. */
extern const void *const GSS_C_NT_HOSTBASED_SERVICE;
const void *const GSS_C_NT_HOSTBASED_SERVICE = NULL;

#define UNUSED(name)                                                                               \
    void name(void);                                                                               \
    void name(void)                                                                                \
    {                                                                                              \
        unused(#name);                                                                             \
    }

/* GSS-API (SPNEGO, Kerberos V5 authentication). */
UNUSED(gss_delete_sec_context)
UNUSED(gss_display_name)
UNUSED(gss_display_status)
UNUSED(gss_import_name)
UNUSED(gss_init_sec_context)
UNUSED(gss_inquire_context)
UNUSED(gss_release_buffer)
UNUSED(gss_release_name)
UNUSED(gss_unwrap)
UNUSED(gss_wrap)

/* librtmp (rtmp://). */
UNUSED(RTMP_Alloc)
UNUSED(RTMP_Close)
UNUSED(RTMP_Connect1)
UNUSED(RTMP_ConnectStream)
UNUSED(RTMP_Free)
UNUSED(RTMP_Init)
UNUSED(RTMP_Read)
UNUSED(RTMP_SetBufferMS)
UNUSED(RTMP_SetupURL)
UNUSED(RTMP_Write)

/* OpenLDAP (ldap://, ldaps://). */
UNUSED(ber_bvfree)
UNUSED(ber_free)
UNUSED(ber_memfree)
UNUSED(ber_memvfree)
UNUSED(ber_sockbuf_add_io)
UNUSED(ldap_abandon_ext)
UNUSED(ldap_err2string)
UNUSED(ldap_free_urldesc)
UNUSED(ldap_get_attribute_ber)
UNUSED(ldap_get_dn_ber)
UNUSED(ldap_get_option)
UNUSED(ldap_init_fd)
UNUSED(ldap_memfree)
UNUSED(ldap_msgfree)
UNUSED(ldap_msgtype)
UNUSED(ldap_parse_result)
UNUSED(ldap_parse_sasl_bind_result)
UNUSED(ldap_pvt_url_scheme2proto)
UNUSED(ldap_result)
UNUSED(ldap_sasl_bind)
UNUSED(ldap_search_ext)
UNUSED(ldap_set_option)
UNUSED(ldap_start_tls)
UNUSED(ldap_unbind_ext)
UNUSED(ldap_url_parse)

/* libssh2 (scp://, sftp://). */
UNUSED(libssh2_agent_connect)
UNUSED(libssh2_agent_disconnect)
UNUSED(libssh2_agent_free)
UNUSED(libssh2_agent_get_identity)
UNUSED(libssh2_agent_init)
UNUSED(libssh2_agent_list_identities)
UNUSED(libssh2_agent_userauth)
UNUSED(libssh2_channel_free)
UNUSED(libssh2_channel_read_ex)
UNUSED(libssh2_channel_send_eof)
UNUSED(libssh2_channel_wait_closed)
UNUSED(libssh2_channel_wait_eof)
UNUSED(libssh2_channel_write_ex)
UNUSED(libssh2_hostkey_hash)
UNUSED(libssh2_knownhost_add)
UNUSED(libssh2_knownhost_checkp)
UNUSED(libssh2_knownhost_del)
UNUSED(libssh2_knownhost_free)
UNUSED(libssh2_knownhost_get)
UNUSED(libssh2_knownhost_init)
UNUSED(libssh2_knownhost_readfile)
UNUSED(libssh2_knownhost_writefile)
UNUSED(libssh2_scp_recv2)
UNUSED(libssh2_scp_send64)
UNUSED(libssh2_session_abstract)
UNUSED(libssh2_session_block_directions)
UNUSED(libssh2_session_callback_set)
UNUSED(libssh2_session_disconnect_ex)
UNUSED(libssh2_session_flag)
UNUSED(libssh2_session_free)
UNUSED(libssh2_session_handshake)
UNUSED(libssh2_session_hostkey)
UNUSED(libssh2_session_init_ex)
UNUSED(libssh2_session_last_errno)
UNUSED(libssh2_session_last_error)
UNUSED(libssh2_session_method_pref)
UNUSED(libssh2_session_set_blocking)
UNUSED(libssh2_sftp_close_handle)
UNUSED(libssh2_sftp_init)
UNUSED(libssh2_sftp_last_error)
UNUSED(libssh2_sftp_mkdir_ex)
UNUSED(libssh2_sftp_open_ex)
UNUSED(libssh2_sftp_read)
UNUSED(libssh2_sftp_readdir_ex)
UNUSED(libssh2_sftp_rename_ex)
UNUSED(libssh2_sftp_rmdir_ex)
UNUSED(libssh2_sftp_seek64)
UNUSED(libssh2_sftp_shutdown)
UNUSED(libssh2_sftp_stat_ex)
UNUSED(libssh2_sftp_statvfs)
UNUSED(libssh2_sftp_symlink_ex)
UNUSED(libssh2_sftp_unlink_ex)
UNUSED(libssh2_sftp_write)
UNUSED(libssh2_userauth_authenticated)
UNUSED(libssh2_userauth_keyboard_interactive_ex)
UNUSED(libssh2_userauth_list)
UNUSED(libssh2_userauth_password_ex)
UNUSED(libssh2_userauth_publickey_fromfile_ex)
