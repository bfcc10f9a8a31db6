// TLS to a daemon that has it on: the CA its certificate must chain to, and a
// client certificate for a daemon started with `--tls-client-certs required`.
import * as grpc from "@grpc/grpc-js";
import { readFileSync } from "node:fs";
import { TlsConfigError } from "./errors.js";

/** The CA file's environment variable (the daemon and the CLI read the same one). */
export const TLS_CA_ENV = "TROUPE_TLS_CA";
/** The client certificate's environment variable (the daemon and the CLI read the same one). */
export const TLS_CERT_ENV = "TROUPE_TLS_CERT";
/** The client key's environment variable (the daemon and the CLI read the same one). */
export const TLS_KEY_ENV = "TROUPE_TLS_KEY";

/**
 * TLS options of a Client or an App, for a daemon with TLS on (`--tls-cert`,
 * `--tls-key`, `--tls-ca`). Each defaults to its environment variable, read
 * when the Client or App is created. The files are read then (a missing one
 * throws {@link TlsConfigError} there) and again each time a connection is
 * opened (each re-connect of an App, a Client used again after `close()`), so
 * renewed files are used from the next connection on.
 */
export interface TlsOptions {
  /**
   * The CA certificates (PEM file) the daemon's certificate must chain to;
   * turns TLS on. The certificate is checked against the host dialled
   * (`troupe certs issue` covers `localhost` and `127.0.0.1`). Defaults to
   * `$TROUPE_TLS_CA`; without either the connection is plaintext.
   */
  tlsCa?: string | undefined;
  /**
   * A client certificate (PEM file) to present, for a daemon started with
   * `--tls-client-certs required`; with `tlsKey`, both or neither. Defaults to
   * `$TROUPE_TLS_CERT` (with `$TROUPE_TLS_KEY`), used only with a CA.
   */
  tlsCert?: string | undefined;
  /** The client certificate's private key (PEM file). Defaults to `$TROUPE_TLS_KEY`. */
  tlsKey?: string | undefined;
}

const CERTIFICATE = "-----BEGIN CERTIFICATE-----";
const PRIVATE_KEY = "PRIVATE KEY-----";

/** A file to read and the option or variable that named it. */
interface TlsFile {
  readonly where: string;
  readonly path: string;
}

/** The files of a TLS connection; none for plaintext. @internal */
export interface TlsFiles {
  readonly ca: TlsFile;
  readonly client: { readonly cert: TlsFile; readonly key: TlsFile } | undefined;
}

function given(value: string | undefined, where: string): TlsFile | undefined {
  return value === undefined || value === "" ? undefined : { where, path: value };
}

/**
 * Which files a Client or App uses, from its options, else the environment
 * (read now, as for tokens): `tlsCa` else `$TROUPE_TLS_CA` turns TLS on;
 * `tlsCert` and `tlsKey` (both or neither) else `$TROUPE_TLS_CERT` and
 * `$TROUPE_TLS_KEY`. Without a CA the variables of a client certificate are
 * ignored (as by the CLI: they may be the daemon's, beside it), the options
 * are an error. Throws {@link TlsConfigError}.
 * @internal
 */
export function resolveTls(options: TlsOptions): TlsFiles | undefined {
  const cert = given(options.tlsCert, "tlsCert");
  const key = given(options.tlsKey, "tlsKey");
  if ((cert === undefined) !== (key === undefined)) {
    throw new TlsConfigError("tlsCert and tlsKey go together (a client certificate and its private key); give both or neither", {
      option: cert === undefined ? "tlsCert" : "tlsKey",
    });
  }
  const ca = given(options.tlsCa, "tlsCa") ?? given(process.env[TLS_CA_ENV], `$${TLS_CA_ENV}`);
  if (cert !== undefined && key !== undefined) {
    if (ca === undefined) {
      throw new TlsConfigError(`tlsCert and tlsKey need tlsCa (or $${TLS_CA_ENV}): the CA the daemon's certificate must chain to, which turns TLS on`, {
        option: "tlsCa",
      });
    }
    return { ca, client: { cert, key } };
  }
  if (ca === undefined) return undefined;
  const envCert = given(process.env[TLS_CERT_ENV], `$${TLS_CERT_ENV}`);
  const envKey = given(process.env[TLS_KEY_ENV], `$${TLS_KEY_ENV}`);
  if (envCert !== undefined && envKey !== undefined) return { ca, client: { cert: envCert, key: envKey } };
  if (envCert !== undefined || envKey !== undefined) {
    throw new TlsConfigError(`$${TLS_CERT_ENV} and $${TLS_KEY_ENV} go together (a client certificate and its private key); set both or neither`, {
      option: envKey === undefined ? `$${TLS_KEY_ENV}` : `$${TLS_CERT_ENV}`,
    });
  }
  return { ca, client: undefined };
}

function read(file: TlsFile, marker: string, holds: string): Buffer {
  let data: Buffer;
  try {
    data = readFileSync(file.path);
  } catch (e) {
    const reason = e instanceof Error ? e.message : String(e);
    throw new TlsConfigError(`cannot read ${file.path} given as ${file.where} (${reason}); give the path of a PEM file holding ${holds}`, {
      option: file.where,
      path: file.path,
      cause: e,
    });
  }
  if (!data.includes(marker)) {
    throw new TlsConfigError(`${file.path} given as ${file.where} holds no PEM ${holds} (no "${marker}" in it)`, { option: file.where, path: file.path });
  }
  return data;
}

/**
 * The credentials of a new channel, the files read now (so that a renewed
 * certificate is used from the next connection on); insecure ones without
 * TLS. Throws {@link TlsConfigError} when a file cannot be read, holds no PEM,
 * or the certificate and key do not go together.
 * @internal
 */
export function channelCredentials(files: TlsFiles | undefined): grpc.ChannelCredentials {
  if (files === undefined) return grpc.credentials.createInsecure();
  const root = read(files.ca, CERTIFICATE, "a CA certificate");
  const client = files.client;
  const cert = client === undefined ? null : read(client.cert, CERTIFICATE, "a certificate");
  const key = client === undefined ? null : read(client.key, PRIVATE_KEY, "a private key");
  try {
    return grpc.credentials.createSsl(root, key, cert);
  } catch (e) {
    // Node's own check of the PEM: a damaged file, or a key that is not the certificate's.
    const reason = e instanceof Error ? e.message : String(e);
    const named = client === undefined ? [files.ca] : [files.ca, client.cert, client.key];
    throw new TlsConfigError(`the TLS files ${named.map((f) => `${f.path} (${f.where})`).join(", ")} cannot be used (${reason})`, {
      option: client === undefined ? files.ca.where : client.cert.where,
      cause: e,
    });
  }
}

/**
 * The PEM bytes of the TLS files for the native core (which checks nothing of
 * its own about them: channelCredentials, called first, has). Throws
 * {@link TlsConfigError} as channelCredentials does.
 * @internal
 */
export function tlsBytes(files: TlsFiles | undefined): { ca?: Buffer; cert?: Buffer; key?: Buffer } {
  if (files === undefined) return {};
  const ca = read(files.ca, CERTIFICATE, "a CA certificate");
  const client = files.client;
  if (client === undefined) return { ca };
  return { ca, cert: read(client.cert, CERTIFICATE, "a certificate"), key: read(client.key, PRIVATE_KEY, "a private key") };
}
